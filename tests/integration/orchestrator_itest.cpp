// The engine against real PostgreSQL and Kafka, with scripted participants: the happy path, a
// failure at each step, replies delivered three times, timeouts and resends, parked sagas,
// idempotent starts and definition versions.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>

#include <map>
#include <pqxx/pqxx>
#include <regex>
#include <set>
#include <thread>

#include "engine/engine.hpp"
#include "outbox/event.hpp"
#include "outbox/uuid.hpp"
#include "tests/support/kafka_read.hpp"
#include "tests/support/kafka_send.hpp"
#include "tests/support/print.hpp"
#include "tests/support/saga_rig.hpp"
#include "tests/support/scripted_participant.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow;
using testing::Count;
using testing::Default;
using testing::Input;
using testing::ReceivedCommand;
using testing::Rig;
using testing::ScriptedParticipant;
using testing::ScriptedReply;
using testing::Sequence;
using testing::WaitFor;

namespace {

// An engine on the rig with the test saga registered, started.
std::unique_ptr<Engine> Started(const Rig& rig) {
    auto engine = std::make_unique<Engine>(rig.Config());
    engine->RegisterDefinition(rig.Yaml(), "itest.yaml");
    engine->Start();
    return engine;
}

std::string StartOne(Engine& engine, const nlohmann::json& input, const std::string& key) {
    const auto result = engine.StartSaga("itest-saga", input, key);
    REQUIRE_MESSAGE(result.status == StartResult::Status::kStarted, result.message);
    return result.saga_id;
}

}  // namespace

TEST_CASE("happy path: every step once, in order, data saved and rendered, every command published") {
    Rig rig;
    auto participant = rig.Participant(Default);
    auto engine_ptr = Started(rig);
    Engine& engine = *engine_ptr;
    std::vector<std::string> ids;
    for (int n = 0; n < 20; ++n) ids.push_back(StartOne(engine, Input("", "", n), "key-" + std::to_string(n)));
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));

    const auto received = participant->Received();
    for (std::size_t n = 0; n < ids.size(); ++n) {
        const auto saga = engine.GetSaga(ids[n]);
        REQUIRE(saga);
        CHECK(saga->status == sagaflow::SagaStatus::kCompleted);
        CHECK(saga->data["reservation"] == "r-//" + std::to_string(n));
        CHECK(Sequence(received, ids[n]) ==
              std::vector<std::string>{"reserve:action", "charge:action", "confirm:action", "notify:action"});
        REQUIRE(saga->steps.size() == 4);
        for (const auto& step : saga->steps) CHECK(step.status == sagaflow::StepPhaseStatus::kSucceeded);
        // Every entry, in order, with what it names (a reply and the next dispatch share a row).
        std::vector<std::string> timeline;
        for (const auto& e : saga->timeline) {
            timeline.push_back(e.kind + (e.step_name.empty() ? "" : " " + e.step_name) +
                               (e.attempt > 0 ? " " + std::to_string(e.attempt) : ""));
        }
        CHECK(timeline == std::vector<std::string>{"started",
                                                   "dispatched reserve 1",
                                                   "reply reserve 1",
                                                   "dispatched charge 1",
                                                   "reply charge 1",
                                                   "dispatched confirm 1",
                                                   "reply confirm 1",
                                                   "dispatched notify 1",
                                                   "reply notify 1",
                                                   "finished"});
        for (const auto& e : saga->timeline) {
            if (e.kind == "dispatched") {
                CHECK(Count(rig.db.Url(),
                            "SELECT count(*) FROM saga_step WHERE saga_id = '" + ids[n] + "' AND step_name = '" +
                                e.step_name + "' AND phase = 'action' AND command_event_id = '" + e.event_id + "'") ==
                      1);
                CHECK(e.detail.contains("type"));
            }
        }
        CHECK(saga->timeline.back().detail["status"] == "completed");
    }
    // One timeline row per saga per transaction: the start, three replies each with the next
    // dispatch, the last reply with the finish.
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_event") == 20 * 5);
    // The saved reservation reached the next command through its template.
    for (const auto& c : received) {
        if (c.step_name == "charge") CHECK(c.data["reservation"] == "r-" + c.data["item"].get<std::string>());
    }
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM outbox") == 80);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_step") == 80);
    // The command's event id is the step row's: one id per step phase.
    CHECK(Count(rig.db.Url(),
                "SELECT count(*) FROM saga_step s JOIN outbox o ON o.event_id = s.command_event_id "
                "AND o.payload->>'stepname' = s.step_name AND o.payload->>'phase' = s.phase "
                "AND o.message_key = s.saga_id::text") == 80);
    const auto metrics = engine.Metrics();
    CHECK(metrics.sagas_started == 20);
    CHECK(metrics.sagas_finished == 20);
    CHECK(metrics.replies_applied == 80);
    engine.Stop();
}

TEST_CASE("starting with an idempotency key: same input replays, other input conflicts, bad input names fields") {
    Rig rig;
    auto engine_ptr = Started(rig);
    Engine& engine = *engine_ptr;
    const auto first = engine.StartSaga("itest-saga", {{"item", "x"}}, "k1");
    REQUIRE(first.status == StartResult::Status::kStarted);
    // Same input, written differently (defaults spelled out, other key order): the same saga.
    const auto again = engine.StartSaga("itest-saga", {{"mode", ""}, {"failAt", ""}, {"item", "x"}}, "k1");
    CHECK(again.status == StartResult::Status::kReplayed);
    CHECK(again.saga_id == first.saga_id);
    const auto other = engine.StartSaga("itest-saga", {{"item", "y"}}, "k1");
    CHECK(other.status == StartResult::Status::kConflict);
    CHECK(other.saga_id == first.saga_id);
    CHECK(other.message.find("other input") != std::string::npos);
    const auto invalid = engine.StartSaga("itest-saga", {{"failAt", 3}}, "k2");
    CHECK(invalid.status == StartResult::Status::kInvalidInput);
    REQUIRE(invalid.errors.size() == 2);
    const auto unknown = engine.StartSaga("no-such-saga", {{"item", "x"}}, "k3");
    CHECK(unknown.status == StartResult::Status::kUnknownType);
    // Without a key every call is a new saga.
    CHECK(engine.StartSaga("itest-saga", {{"item", "x"}}, "").saga_id !=
          engine.StartSaga("itest-saga", {{"item", "x"}}, "").saga_id);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_instance") == 3);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM outbox") == 3);  // one first command each
    CHECK_FALSE(engine.GetSaga(outbox::NewUuidV7()));
    CHECK_FALSE(engine.GetSaga("not-a-uuid"));
    engine.Stop();
}

TEST_CASE("a start whose connection is lost after it committed is run again and started once") {
    Rig rig;
    auto participant = rig.Participant(Default);
    auto engine_ptr = Started(rig);
    Engine& engine = *engine_ptr;
    // Each start's statement commits, then its connection closes before the answer is read: the
    // engine runs the same statement again on a new connection, which meets the first run's rows.
    StartResult keyed, unkeyed;
    {
        ::setenv("SAGAFLOW_TEST_FAULT", "start-reply-lost", 1);
        const std::shared_ptr<void> unset{nullptr, [](void*) { ::unsetenv("SAGAFLOW_TEST_FAULT"); }};
        keyed = engine.StartSaga("itest-saga", Input("", "", 1), "lost-1");
        unkeyed = engine.StartSaga("itest-saga", Input("", "", 2), "");
    }
    CHECK_MESSAGE(keyed.status == StartResult::Status::kStarted, keyed.message);
    CHECK_MESSAGE(unkeyed.status == StartResult::Status::kStarted, unkeyed.message);
    CHECK(keyed.saga_id != unkeyed.saga_id);
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));
    for (const auto& id : {keyed.saga_id, unkeyed.saga_id}) {
        const auto saga = engine.GetSaga(id);
        REQUIRE(saga);
        CHECK(saga->status == sagaflow::SagaStatus::kCompleted);
        CHECK(saga->timeline.front().kind == "started");
        CHECK(Sequence(participant->Received(), id) ==
              std::vector<std::string>{"reserve:action", "charge:action", "confirm:action", "notify:action"});
    }
    // Started once each: one saga row, one started entry, one first command.
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_instance") == 2);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_event WHERE kind = 'started'") == 2);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_step WHERE step_name = 'reserve' AND phase = 'action'") == 2);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM outbox") == 8);
    CHECK(engine.Metrics().sagas_started == 2);
    // The key still replays its saga.
    const auto replay = engine.StartSaga("itest-saga", Input("", "", 1), "lost-1");
    CHECK(replay.status == StartResult::Status::kReplayed);
    CHECK(replay.saga_id == keyed.saga_id);
    engine.Stop();
}

TEST_CASE("Stop returns promptly while the timer scan works through a backlog of due timers") {
    Rig rig;  // no participant answers: every command times out after 100 ms
    Engine engine{rig.Config()};
    engine.RegisterDefinition(rig.Yaml(1, "Notify.v1", "100ms"), "itest.yaml");
    engine.Start();
    constexpr int kSagas = 4000;
    std::atomic<int> next{0}, refused{0};
    std::vector<std::thread> starters;
    for (int t = 0; t < 4; ++t) {
        starters.emplace_back([&] {
            for (int n; (n = next++) < kSagas;) {
                if (!engine.StartSaga("itest-saga", Input("", "", n), "").Accepted()) ++refused;
            }
        });
    }
    for (auto& starter : starters) starter.join();
    REQUIRE(refused == 0);
    // A backlog: far more due timers than one scan fires in a few seconds.
    const std::string due = "SELECT count(*) FROM saga_step WHERE status = 'dispatched' AND deadline_at < now()";
    REQUIRE(WaitFor([&] { return Count(rig.db.Url(), due) >= 2000; }, std::chrono::seconds(60)));
    const auto backlog = Count(rig.db.Url(), due);
    const auto before = std::chrono::steady_clock::now();
    engine.Stop();
    const auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
    // The scan stops between two timers; each timer it fired committed on its own.
    CHECK_MESSAGE(took < 3.0, "Stop took " << took << " s with " << backlog << " timers due");
    MESSAGE("Stop took " << took << " s with " << backlog << " timers due");
}

TEST_CASE("a failure at each step compensates exactly the completed compensatable steps, newest first") {
    Rig rig;
    auto participant = rig.Participant(Default);
    auto engine_ptr = Started(rig);
    Engine& engine = *engine_ptr;
    const std::map<std::string, std::vector<std::string>> expected{
        {"reserve", {"reserve:action"}},
        {"charge", {"reserve:action", "charge:action", "reserve:compensation"}},
        {"confirm",
         {"reserve:action", "charge:action", "confirm:action", "charge:compensation", "reserve:compensation"}},
    };
    std::map<std::string, std::string> saga_of;
    for (const auto& [step, sequence] : expected) saga_of[step] = StartOne(engine, Input(step, "", 0), "f-" + step);
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));
    const auto received = participant->Received();
    for (const auto& [step, sequence] : expected) {
        CAPTURE(step);
        const auto saga = engine.GetSaga(saga_of[step]);
        CHECK(saga->status == sagaflow::SagaStatus::kCompensated);
        CHECK(Sequence(received, saga_of[step]) == sequence);
        // The refund carries what the reservation step saved.
        for (const auto& c : received) {
            if (c.saga_id == saga_of[step] && c.type == "Refund.v1")
                CHECK(c.data["reservation"] == "r-" + step + "//0");
        }
    }
    engine.Stop();
}

TEST_CASE("compensations are retried until they succeed; a compensation past its budget parks the saga") {
    Rig rig;
    // Release fails twice, then succeeds ("flaky"), or always fails ("stuck"). The compensation
    // carries no item, so the script looks the saga up in a map the test fills.
    std::mutex mutex;
    std::map<std::string, std::string> mode_of;  // saga id -> flaky | stuck
    auto participant = rig.Participant([&](const ReceivedCommand& c) {
        std::vector<ScriptedReply> replies = Default(c);
        std::lock_guard lock(mutex);
        const std::string mode = mode_of.count(c.saga_id) ? mode_of[c.saga_id] : "";
        if (c.type == "Release.v1" && (mode == "stuck" || (mode == "flaky" && c.delivery <= 2))) {
            replies[0].outcome = "failure";
        }
        return replies;
    });
    auto engine_ptr = Started(rig);
    Engine& engine = *engine_ptr;
    std::string flaky, stuck;
    {
        std::lock_guard lock(mutex);
        flaky = StartOne(engine, Input("charge", "", 1), "flaky");
        mode_of[flaky] = "flaky";
        stuck = StartOne(engine, Input("charge", "", 2), "stuck");
        mode_of[stuck] = "stuck";
    }
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));
    const auto received = participant->Received();
    const auto releases = [&](const std::string& saga_id) {
        std::set<std::string> ids;
        int deliveries = 0;
        for (const auto& c : received) {
            if (c.saga_id == saga_id && c.type == "Release.v1") {
                ids.insert(c.event_id);
                ++deliveries;
            }
        }
        CHECK(ids.size() == 1);  // every resend is the same event
        return deliveries;
    };
    const auto flaky_saga = engine.GetSaga(flaky);
    CHECK(flaky_saga->status == sagaflow::SagaStatus::kCompensated);
    CHECK(releases(flaky) == 3);
    const auto stuck_saga = engine.GetSaga(stuck);
    CHECK(stuck_saga->status == sagaflow::SagaStatus::kFailed);
    CHECK(stuck_saga->parked_reason.find("compensation of step 'reserve'") != std::string::npos);
    CHECK(releases(stuck) == 4);  // compensationRetry.maxAttempts
    CHECK(engine.Metrics().sagas_parked == 1);
    // Operators find parked sagas with a query.
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_instance WHERE status = 'failed' AND parked_reason <> ''") ==
          1);
    engine.Stop();
}

TEST_CASE("a retriable step that keeps failing is retried with the same event id, then parked") {
    Rig rig;
    auto participant = rig.Participant(Default);
    auto engine_ptr = Started(rig);
    Engine& engine = *engine_ptr;
    const auto id = StartOne(engine, Input("notify", "", 0), "n");
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));
    const auto saga = engine.GetSaga(id);
    CHECK(saga->status == sagaflow::SagaStatus::kFailed);
    CHECK(saga->parked_reason.find("retriable step 'notify'") != std::string::npos);
    std::set<std::string> ids;
    for (const auto& c : participant->Received()) {
        if (c.saga_id == id && c.step_name == "notify") ids.insert(c.event_id);
    }
    CHECK(ids.size() == 1);
    const auto notify =
        std::find_if(saga->steps.begin(), saga->steps.end(), [](const auto& s) { return s.step_name == "notify"; });
    REQUIRE(notify != saga->steps.end());
    CHECK(notify->attempt == 3);
    // Nothing was compensated: the pivot had passed.
    for (const auto& step : saga->steps) CHECK(step.phase == sagaflow::StepPhase::kAction);
    engine.Stop();
}

TEST_CASE("every reply delivered three times changes nothing") {
    Rig rig;
    // Even sagas: each reply record three times (same event id: the inbox drops two). Odd sagas: a
    // participant that answers three times (three ids: the saga ignores the answered step).
    auto participant = rig.Participant([](const ReceivedCommand& c) {
        auto replies = Default(c);
        const std::string item = c.data.value("item", std::string());
        const bool odd = !item.empty() && (item.back() - '0') % 2 == 1;
        replies[0].copies = 3;
        replies[0].new_ids = odd;
        return replies;
    });
    auto engine_ptr = Started(rig);
    Engine& engine = *engine_ptr;
    std::vector<std::string> ids;
    for (int n = 0; n < 10; ++n)
        ids.push_back(StartOne(engine, Input(n < 6 ? "" : "charge", "", n), std::to_string(n)));
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));
    // Let the last copies arrive, then check nothing moved.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const auto received = participant->Received();
    for (int n = 0; n < 10; ++n) {
        const auto saga = engine.GetSaga(ids[static_cast<std::size_t>(n)]);
        CHECK(saga->status == (n < 6 ? sagaflow::SagaStatus::kCompleted : sagaflow::SagaStatus::kCompensated));
        CHECK(Sequence(received, saga->saga_id).size() == (n < 6 ? 4U : 3U));
        for (const auto& c : received) {
            if (c.saga_id == saga->saga_id) CHECK(c.delivery == 1);  // no command was sent twice
        }
    }
    // 6 x 4 + 4 x 3 step phases, one row and one outbox record each.
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_step") == 36);
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM outbox") == 36);
    const auto metrics = engine.Metrics();
    CHECK(metrics.replies_applied == 36);
    CHECK(metrics.reply_duplicates > 0);
    CHECK(metrics.replies_ignored > 0);
    // The answers for answered steps (or finished sagas) are recorded in the timeline as ignored,
    // with the reason; 2 extra answers for each of the 5 odd sagas' step phases.
    CHECK(metrics.replies_ignored == 2 * (3 * 4 + 2 * 3));
    CHECK(Count(rig.db.Url(),
                "SELECT count(*) FROM saga_timeline WHERE kind = 'ignored' AND (detail->>'reason' LIKE '%is already "
                "answered' OR detail->>'reason' LIKE 'the saga is already %')") ==
          static_cast<long long>(metrics.replies_ignored));
    engine.Stop();
}

TEST_CASE("a lost command times out and is resent with the same event id; stray replies are recorded and ignored") {
    Rig rig;
    // The first delivery of every charge is lost.
    auto participant = rig.Participant([](const ReceivedCommand& c) {
        if (c.step_name == "charge" && c.delivery == 1) return std::vector<ScriptedReply>{};
        return Default(c);
    });
    auto engine_ptr = Started(rig);
    Engine& engine = *engine_ptr;
    const auto id = StartOne(engine, Input("", "", 7), "lost");
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));
    const auto saga = engine.GetSaga(id);
    CHECK(saga->status == sagaflow::SagaStatus::kCompleted);
    std::vector<std::string> charge_ids;
    for (const auto& c : participant->Received()) {
        if (c.saga_id == id && c.step_name == "charge") charge_ids.push_back(c.event_id);
    }
    REQUIRE(charge_ids.size() == 2);
    CHECK(charge_ids[0] == charge_ids[1]);
    std::vector<std::string> kinds;
    for (const auto& entry : saga->timeline) {
        if (entry.step_name == "charge") kinds.push_back(entry.kind);
    }
    CHECK(kinds == std::vector<std::string>{"dispatched", "timeout", "retry-scheduled", "resent", "reply"});

    // Replies that belong nowhere: an unknown saga, a bad outcome, a wrong correlation id.
    const auto produce = [&](const std::string& saga_id, const std::string& outcome, const std::string& corr) {
        testing::SendEvent(
            rig.brokers,
            rig.replies,
            testing::SagaEvent(saga_id, "reserve", "action", "Reserve.v1.reply", {{"outcome", outcome}}, corr));
    };
    produce(outbox::NewUuidV7(), "success", "");
    produce(id, "maybe", "");
    produce(id, "success", outbox::NewUuidV7());
    CHECK(WaitFor([&] { return Count(rig.db.Url(), "SELECT count(*) FROM saga_timeline WHERE kind = 'ignored'") == 3; },
                  std::chrono::seconds(30)));
    // Only the reply to an unknown saga belongs to none; a bad outcome is in its saga's timeline.
    CHECK(Count(rig.db.Url(), "SELECT count(*) FROM saga_timeline WHERE kind = 'ignored' AND saga_id IS NULL") == 1);
    const auto timeline = engine.GetSaga(id)->timeline;
    CHECK(std::count_if(timeline.begin(), timeline.end(), [](const sagaflow::TimelineEntry& entry) {
              return entry.kind == "ignored" &&
                     entry.detail.value("reason", "") == "data.outcome must be success, failure or retry, not 'maybe'";
          }) == 1);
    CHECK(engine.GetSaga(id)->status == sagaflow::SagaStatus::kCompleted);
    engine.Stop();
}

TEST_CASE("a reply nested 100,000 deep is dead-lettered and committed past; a number as outcome is recorded") {
    Rig rig;
    auto participant = rig.Participant(Default);
    auto engine = Started(rig);
    const auto id = StartOne(*engine, Input("", "", 1), "deep");
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));

    // The record that crash-looped the engine: its data copied recursively. Built by hand, since
    // serialising it here would recurse as deep.
    auto event = testing::SagaEvent(id, "reserve", "action", "Reserve.v1.reply", {{"outcome", "DEEP"}});
    std::string value = event.ToJson().dump();
    value.replace(value.find("\"DEEP\""), 6, std::string(100'000, '[') + std::string(100'000, ']'));
    testing::SendValue(rig.brokers, rig.replies, id, value);
    // A reply whose outcome is a number: recorded in its saga's timeline and ignored, not dead-lettered.
    testing::SendEvent(
        rig.brokers, rig.replies, testing::SagaEvent(id, "reserve", "action", "Reserve.v1.reply", {{"outcome", 1}}));

    const auto dlq = testing::ReadTopic(rig.brokers, rig.replies + ".dlq", 1, std::chrono::seconds(60));
    REQUIRE(dlq.size() == 1);
    CHECK(dlq[0].headers.at("sagaflow-dlq-reason").find("deeper than 64 levels") != std::string::npos);
    const std::string ignored = "SELECT count(*) FROM saga_timeline WHERE kind = 'ignored' AND saga_id = '" + id + "'";
    CHECK(WaitFor([&] { return Count(rig.db.Url(), ignored) == 1; }, std::chrono::seconds(30)));
    CHECK(Count(rig.db.Url(),
                ignored + " AND detail->>'reason' = 'data.outcome must be success, failure or retry, not ''1'''") == 1);
    // The engine lives on and runs the next saga.
    StartOne(*engine, Input("", "", 2), "after");
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));
    engine->Stop();
    // Its offsets moved past both records: a restarted engine reads neither again.
    engine = Started(rig);
    StartOne(*engine, Input("", "", 3), "restarted");
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));
    engine->Stop();
    CHECK(testing::ReadTopic(rig.brokers, rig.replies + ".dlq", 2, std::chrono::seconds(5)).size() == 1);
    CHECK(Count(rig.db.Url(), ignored) == 1);
}

TEST_CASE("a saga's deadline cancels it before its point of no return, and no longer applies after it") {
    Rig rig;
    // Holds back the answer to the action named after "hold-" in the item: that step stays in flight.
    auto participant = rig.Participant([](const ReceivedCommand& c) {
        const std::string item = c.data.value("item", std::string());
        if (c.phase == "action" && item.rfind("hold-" + c.step_name + "/", 0) == 0) {
            return std::vector<ScriptedReply>{};
        }
        return Default(c);
    });
    // Step timeouts far beyond the test: only the deadline can end a held step.
    std::string yaml = rig.Yaml(1, "Notify.v1", "5m");
    const auto at = yaml.find("version: 1\n");
    REQUIRE(at != std::string::npos);
    yaml.insert(at + std::string("version: 1\n").size(), "deadline: 3s\n");
    auto engine = std::make_unique<Engine>(rig.Config());
    engine->RegisterDefinition(yaml, "itest-deadline.yaml");
    engine->Start();
    const auto held = StartOne(*engine, {{"item", "hold-charge/x/1"}}, "d1");
    const auto late = StartOne(*engine, {{"item", "hold-notify/x/2"}}, "d2");
    const auto quick = StartOne(*engine, {{"item", "quick/x/3"}}, "d3");
    CHECK_FALSE(engine->GetSaga(late)->deadline_at.empty());  // shown while it can still cancel
    // The charge is still in flight at the deadline: it is cancelled, refunded, the reservation released.
    REQUIRE(WaitFor([&] { return engine->GetSaga(held)->status == sagaflow::SagaStatus::kCompensated; },
                    std::chrono::seconds(30)));
    CHECK(Sequence(participant->Received(), held) ==
          std::vector<std::string>{"reserve:action", "charge:action", "charge:compensation", "reserve:compensation"});
    const auto saga = engine->GetSaga(held);
    int cancelled = 0;
    for (const auto& entry : saga->timeline) {
        if (entry.kind != "cancelled") continue;
        ++cancelled;
        CHECK(entry.step_name == "charge");
        CHECK(entry.detail["reason"] == "its deadline of 3s passed");
    }
    CHECK(cancelled == 1);
    CHECK(saga->steps[1].status == sagaflow::StepPhaseStatus::kCancelled);
    // Past the pivot (notify in flight) the deadline only leaves its mark; the saga runs on.
    REQUIRE(WaitFor(
        [&] {
            return Count(rig.db.Url(),
                         "SELECT count(*) FROM saga_timeline WHERE kind = 'deadline-passed' AND saga_id = '" + late +
                             "'") == 1;
        },
        std::chrono::seconds(30)));
    CHECK(engine->GetSaga(late)->status == sagaflow::SagaStatus::kRunning);
    CHECK(engine->GetSaga(late)->deadline_at.empty());
    CHECK(saga->deadline_at.empty());  // compensated: no longer running
    CHECK(Count(rig.db.Url(),
                "SELECT count(*) FROM saga_instance WHERE deadline_at IS NOT NULL AND saga_id = '" + late + "'") == 0);
    // A saga that ends before its deadline is not touched by it.
    CHECK(engine->GetSaga(quick)->status == sagaflow::SagaStatus::kCompleted);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    CHECK(Count(rig.db.Url(),
                "SELECT count(*) FROM saga_timeline WHERE saga_id = '" + quick +
                    "' AND kind IN ('cancelled', 'deadline-passed')") == 0);
    CHECK(engine->Metrics().sagas_cancelled == 1);
    engine->Stop();
}

TEST_CASE("a saga keeps the definition version it started with, across a newer registration and a restart") {
    Rig rig;
    std::atomic<bool> hold{true};  // notify is not answered while held
    auto participant = rig.Participant([&](const ReceivedCommand& c) {
        if (c.step_name == "notify" && hold.load()) return std::vector<ScriptedReply>{};
        return Default(c);
    });
    auto config = rig.Config();
    std::string old_id;
    {
        Engine engine{config};
        engine.RegisterDefinition(rig.Yaml(1, "Notify.v1"), "v1.yaml");
        engine.Start();
        old_id = StartOne(engine, Input("", "", 1), "old");
        REQUIRE(WaitFor(
            [&] {
                for (const auto& c : participant->Received())
                    if (c.saga_id == old_id && c.step_name == "notify") return true;
                return false;
            },
            std::chrono::seconds(30)));
        engine.Stop();
    }
    // A new process knows only version 2; the old saga resumes on version 1 (read back from the
    // database), new sagas start on version 2.
    Engine engine{config};
    engine.RegisterDefinition(rig.Yaml(2, "Notify.v2"), "v2.yaml");
    CHECK_THROWS_WITH_AS(engine.RegisterDefinition(rig.Yaml(2, "Notify.v3"), "v2-edited.yaml"),
                         doctest::Contains("already registered with other content"),
                         EngineError);
    engine.Start();
    const auto new_id = StartOne(engine, Input("", "", 2), "new");
    hold = false;
    REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));
    std::map<std::string, std::set<std::string>> notify_types;
    for (const auto& c : participant->Received()) {
        if (c.step_name == "notify") notify_types[c.saga_id].insert(c.type);
    }
    CHECK(notify_types[old_id] == std::set<std::string>{"Notify.v1"});
    CHECK(notify_types[new_id] == std::set<std::string>{"Notify.v2"});
    CHECK(engine.GetSaga(old_id)->definition_version == 1);
    CHECK(engine.GetSaga(old_id)->status == sagaflow::SagaStatus::kCompleted);
    CHECK(engine.GetSaga(new_id)->definition_version == 2);
    engine.Stop();
}

TEST_CASE("an engine with a history retention deletes the finished sagas past it when it starts, and keeps the rest") {
    Rig rig;
    auto participant = rig.Participant(Default);
    std::string old_id, recent_id;
    {
        auto engine = Started(rig);
        old_id = StartOne(*engine, Input("", "", 1), "old");
        recent_id = StartOne(*engine, Input("", "", 2), "recent");
        REQUIRE(WaitFor([&] { return rig.Open() == 0; }, std::chrono::seconds(60)));
        engine->Stop();
    }
    testing::Execute(rig.db.Url(),
                     "UPDATE saga_instance SET created_at = now() - interval '40 days', updated_at = now() - interval "
                     "'31 days' WHERE saga_id = '" +
                         old_id + "'");
    const auto rows_of = [&](const std::string& id) { return testing::SagaRowCount(rig.db.Url(), id); };
    const long long recent_rows = rows_of(recent_id);
    REQUIRE(rows_of(old_id) == recent_rows);

    auto config = rig.Config();
    config.history_retention = std::chrono::hours(48);
    CHECK_THROWS_WITH_AS(Engine{config},
                         doctest::Contains("history_retention: a horizon of 48 h is refused: it must be at least 72 h"),
                         EngineError);
    config.history_retention = std::chrono::hours(24 * 30);
    Engine engine{config};
    engine.RegisterDefinition(rig.Yaml(), "itest.yaml");
    engine.Start();
    CHECK(WaitFor([&] { return rows_of(old_id) == 0; }, std::chrono::seconds(30)));
    CHECK_FALSE(engine.GetSaga(old_id).has_value());
    CHECK(rows_of(recent_id) == recent_rows);
    CHECK(engine.GetSaga(recent_id)->status == sagaflow::SagaStatus::kCompleted);
    engine.Stop();
}
