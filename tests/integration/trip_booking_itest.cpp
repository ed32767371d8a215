// sagas/trip-booking.yaml end to end on the real broker and PostgreSQL, with its participants from
// examples/trip-booking: the holds and the insurance side by side, a skipped insurance, a failure
// injected in each branch and at the pivot, a cancel while both holds are in flight, and the audit.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <pqxx/pqxx>
#include <thread>

#include "engine/engine.hpp"
#include "examples/trip-booking/trip_participants.hpp"
#include "tests/support/services.hpp"
#include "tools/audit.hpp"

using namespace sagaflow;
using testing::Count;
using testing::WaitFor;

namespace {

nlohmann::json Trip(const std::string& trip_id,
                    bool insurance,
                    const std::string& hotel = "grand",
                    const std::string& flight = "LH100",
                    const std::string& total = "1200.00",
                    int nights = 3) {
    return {{"tripId", trip_id},
            {"traveller", {{"name", "Ada"}, {"email", "ada@example.com"}}},
            {"hotel", {{"hotelId", hotel}, {"nights", nights}}},
            {"flights", {{{"flightNo", flight}, {"date", "2027-01-10"}}}},
            {"total", total},
            {"insurance", insurance}};
}

std::string Status(const std::string& url, const std::string& sql) {
    pqxx::connection c(url);
    pqxx::work tx(c);
    const auto rows = tx.exec(sql);
    return rows.empty() || rows[0][0].is_null() ? "" : rows[0][0].as<std::string>();
}

}  // namespace

TEST_CASE("trip-booking: branches side by side, a skipped insurance, a failure in each branch, a cancel in flight") {
    testing::ScratchDatabase db;
    std::string suffix = testing::UniqueName("trip");
    std::replace(suffix.begin(), suffix.end(), '_', '-');  // participant names are kebab-case
    EngineConfig config;
    config.database_url = db.Url();
    config.kafka_brokers = testing::KafkaBrokers();
    config.replies_topic = "trip-replies-" + suffix;
    config.consumer_group = "engine-" + suffix;
    config.timer_max_sleep = std::chrono::milliseconds(200);
    Engine engine(config);
    const char* source = std::getenv("SAGAFLOW_SOURCE_DIR");
    REQUIRE_MESSAGE(source != nullptr, "SAGAFLOW_SOURCE_DIR is not set: run this test through ctest");
    // The participants under names (and so topics and consumer groups) of this test's own: other
    // tests run beside it on the same broker with a participant called payment.
    std::ifstream file(std::filesystem::path(source) / "sagas/trip-booking.yaml");
    const std::string yaml((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    engine.RegisterDefinition(trip::WithParticipantSuffix(yaml, suffix), "trip-booking.yaml");
    engine.Start();

    ParticipantConfig base;
    base.database_url = db.Url();
    base.kafka_brokers = config.kafka_brokers;
    base.replies_topic = config.replies_topic;
    std::vector<std::unique_ptr<Participant>> participants;
    for (const auto& role : trip::kParticipants) {
        base.name = role + "-" + suffix;
        participants.push_back(trip::Make(role, base, std::chrono::seconds(3)));
        participants.back()->Start();
    }

    const auto start = [&](const std::string& key, const nlohmann::json& input) {
        const auto result = engine.StartSaga("trip-booking", input, key);
        REQUIRE_MESSAGE(result.status == StartResult::Status::kStarted, result.message);
        return result.saga_id;
    };
    std::map<std::string, std::string> ids;
    ids["insured"] = start("insured", Trip("t-insured", true));
    ids["plain"] = start("plain", Trip("t-plain", false));
    ids["hotel-full"] = start("hotel-full", Trip("t-hotel-full", true, "full-1"));
    ids["flight-full"] = start("flight-full", Trip("t-flight-full", true, "grand", "XX000"));
    ids["uninsurable"] = start("uninsurable", Trip("t-uninsurable", true, "grand", "LH100", "1200.00", 40));
    ids["declined"] = start("declined", Trip("t-declined", true, "grand", "LH100", "9000.00"));
    const auto ended = [&](const std::string& id) {
        const auto saga = engine.GetSaga(id);
        return saga && saga->Terminal();
    };
    REQUIRE(WaitFor([&] { return std::all_of(ids.begin(), ids.end(), [&](const auto& e) { return ended(e.second); }); },
                    std::chrono::seconds(90)));

    const auto saga = [&](const std::string& name) { return *engine.GetSaga(ids.at(name)); };
    const auto step = [](const SagaView& view, const std::string& name, StepPhase phase = StepPhase::kAction) {
        for (const auto& s : view.steps) {
            if (s.step_name == name && s.phase == phase) return std::optional<StepPhaseRecord>(s);
        }
        return std::optional<StepPhaseRecord>();
    };
    const std::string& url = db.Url();

    {  // every outcome
        // Insured: the three first steps went out in the saga's first transaction, then the rest.
        const auto insured = saga("insured");
        CHECK(insured.status == SagaStatus::kCompleted);
        std::vector<std::string> first;
        for (const auto& e : insured.timeline) {
            if (e.kind == "reply") break;
            if (e.kind == "dispatched") first.push_back(e.step_name);
        }
        std::sort(first.begin(), first.end());
        CHECK(first == std::vector<std::string>{"insure", "reserve-flight", "reserve-hotel"});
        CHECK(step(insured, "reserve-hotel")->dispatched_at == step(insured, "reserve-flight")->dispatched_at);
        CHECK(Status(url, "SELECT status FROM trip_hotel.room_hold WHERE trip_id = 't-insured'") == "confirmed");
        CHECK(Status(url, "SELECT status FROM trip_airline.seat_hold WHERE hold_id = 'seats-t-insured'") ==
              "confirmed");
        CHECK(Status(url, "SELECT status FROM trip_insurance.travel_policy WHERE policy_id = 'policy-t-insured'") ==
              "active");
        CHECK(Status(url, "SELECT insured::text FROM trip_notify.itinerary WHERE trip_id = 't-insured'") == "true");
        CHECK(Count(url, "SELECT count(*) FROM trip_payment.card_charge WHERE trip_id = 't-insured'") == 1);

        // Not insured: the insurance step is skipped, with the reason, and nothing is bought.
        const auto plain = saga("plain");
        CHECK(plain.status == SagaStatus::kCompleted);
        REQUIRE(step(plain, "insure"));
        CHECK(step(plain, "insure")->status == StepPhaseStatus::kSkipped);
        CHECK(!step(plain, "insure", StepPhase::kCompensation));
        const auto skipped = std::find_if(
            plain.timeline.begin(), plain.timeline.end(), [](const auto& e) { return e.kind == "skipped"; });
        REQUIRE(skipped != plain.timeline.end());
        CHECK(skipped->step_name == "insure");
        CHECK(skipped->detail["reason"] == "$.input.insurance equals true is false: $.input.insurance was false");
        CHECK(Count(url, "SELECT count(*) FROM trip_insurance.travel_policy WHERE saga_id = '" + ids["plain"] + "'") ==
              0);
        CHECK(Count(url,
                    "SELECT count(*) FROM outbox WHERE payload->>'sagaid' = '" + ids["plain"] +
                        "' AND payload->>'stepname' = 'insure'") == 0);
        CHECK(Status(url, "SELECT insured::text FROM trip_notify.itinerary WHERE trip_id = 't-plain'") == "false");

        // A failure in each branch, and at the pivot: whatever took effect is undone, nothing is charged.
        for (const auto& name : {"hotel-full", "flight-full", "uninsurable", "declined"}) {
            CAPTURE(name);
            const auto view = saga(name);
            CHECK(view.status == SagaStatus::kCompensated);
            const std::string trip = std::string("t-") + name;
            CHECK(Status(url,
                         "SELECT coalesce(string_agg(status, ','), 'none') FROM trip_hotel.room_hold WHERE "
                         "trip_id = '" +
                             trip + "'") == (std::string(name) == "hotel-full" ? "none" : "released"));
            CHECK(Status(url,
                         "SELECT coalesce(string_agg(status, ','), 'none') FROM trip_airline.seat_hold WHERE "
                         "saga_id = '" +
                             view.saga_id + "'") == (std::string(name) == "flight-full" ? "none" : "released"));
            CHECK(Status(url,
                         "SELECT coalesce(string_agg(status, ','), 'none') FROM trip_insurance.travel_policy "
                         "WHERE saga_id = '" +
                             view.saga_id + "'") == (std::string(name) == "uninsurable" ? "none" : "cancelled"));
            CHECK(Count(url, "SELECT count(*) FROM trip_payment.card_charge WHERE trip_id = '" + trip + "'") == 0);
            CHECK(!step(view, "confirm-hotel"));
        }
    }

    {  // a cancel while both holds are in flight
        const std::string id = start("slow", Trip("t-slow", false, "slow-1", "SLOW1"));
        REQUIRE(WaitFor([&] { return Count(url, "SELECT count(*) FROM saga_step WHERE saga_id = '" + id + "'") == 3; },
                        std::chrono::seconds(10)));
        std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the holds are being made, slowly
        const auto cancelled = engine.CancelSaga(id, "the traveller changed plans");
        CHECK(cancelled.status == CancelResult::Status::kCancelled);
        REQUIRE(WaitFor([&] { return ended(id); }, std::chrono::seconds(60)));
        const auto view = *engine.GetSaga(id);
        CHECK(view.status == SagaStatus::kCompensated);
        CHECK(step(view, "reserve-hotel")->status == StepPhaseStatus::kCancelled);
        CHECK(step(view, "reserve-flight")->status == StepPhaseStatus::kCancelled);
        CHECK(step(view, "reserve-hotel", StepPhase::kCompensation)->status == StepPhaseStatus::kSucceeded);
        CHECK(step(view, "reserve-flight", StepPhase::kCompensation)->status == StepPhaseStatus::kSucceeded);
        // Each participant took the hold first (the same key keeps a saga's commands in order), then its release.
        REQUIRE(WaitFor(
            [&] {
                return Status(url, "SELECT status FROM trip_hotel.room_hold WHERE trip_id = 't-slow'") == "released" &&
                       Status(url, "SELECT status FROM trip_airline.seat_hold WHERE saga_id = '" + id + "'") ==
                           "released";
            },
            std::chrono::seconds(30)));
        CHECK(Count(url, "SELECT count(*) FROM trip_payment.card_charge WHERE trip_id = 't-slow'") == 0);
    }

    // Every effect once, every compensation once and after its dependants', nothing left hanging.
    REQUIRE(WaitFor(
        [&] {
            return Count(url,
                         "SELECT count(*) FROM saga_instance WHERE status IN ('running', "
                         "'compensating')") == 0;
        },
        std::chrono::seconds(60)));
    AuditOptions audit;
    audit.db_url = url;
    for (const auto& name : trip::kParticipants) audit.participant_schemas.push_back("trip_" + name);
    const auto report = AuditBlocking(audit);
    INFO(report.Summary());
    CHECK(report.Ok());
    for (auto& p : participants) p->Stop();
    engine.Stop();
}
