// The participant API against real PostgreSQL and Kafka: effect, dedup and reply in one
// transaction; a repeated command gets the stored reply (same reply event id); null compensation;
// anti-hanging; a Retry answer leaves nothing behind.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <pqxx/pqxx>

#include "outbox/admin.hpp"
#include "outbox/event.hpp"
#include "outbox/uuid.hpp"
#include "participant/participant.hpp"
#include "store/migrations.hpp"
#include "tests/support/kafka_read.hpp"
#include "tests/support/kafka_send.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow;
using testing::Count;
using testing::WaitFor;

namespace {

struct ParticipantRig {
    testing::ScratchDatabase db;
    std::string brokers = testing::KafkaBrokers();
    std::string name = "p-" + testing::UniqueName("x").substr(2);
    std::string replies = "replies-" + name;
    std::atomic<int> charges{0};
    std::atomic<int> refunds{0};
    std::atomic<int> flaky_calls{0};
    std::atomic<int> boom_calls{0};
    std::atomic<int> busy_calls{0};
    std::mutex trace_mutex;
    std::string charge_trace;  // the traceparent and tracestate the last charge handler saw
    // The planner settings each handler's SQL ran with ("plan_cache_mode enable_seqscan"): the
    // server's, although the participant's own statements plan on sagaflow's.
    std::mutex planner_mutex;
    std::vector<std::string> planner_seen;
    std::unique_ptr<Participant> participant;

    // start = false: commands can be sent first (Start() then takes them as one burst).
    explicit ParticipantRig(bool start = true, std::chrono::hours inbox_ttl = std::chrono::hours(48)) {
        ParticipantConfig config;
        config.inbox_ttl = inbox_ttl;
        config.name = name;
        config.database_url = db.Url();
        config.schema = "svc";
        config.kafka_brokers = brokers;
        config.replies_topic = replies;
        participant = std::make_unique<Participant>(config);
        participant->Setup([](Transaction& tx) {
            tx.Execute("CREATE TABLE IF NOT EXISTS effect (saga_id uuid, what text, amount int)");
        });
        participant->OnAction("Charge.v1", [this](Transaction& tx, const Command& c) {
            ++charges;
            RecordPlanner(tx);
            {
                const std::lock_guard lock{trace_mutex};
                charge_trace = c.traceparent + " " + c.tracestate;
            }
            tx.Execute("INSERT INTO effect VALUES ($1::uuid, 'charge', $2::int)",
                       {c.saga_id, std::to_string(c.data.value("amount", 0))});
            return StepReply::Success({{"charged", c.data.value("amount", 0)}});
        });
        participant->OnCompensation("Refund.v1", [this](Transaction& tx, const Command& c) {
            ++refunds;
            tx.Execute("INSERT INTO effect VALUES ($1::uuid, 'refund', 0)", {c.saga_id});
            return StepReply::Success();
        });
        // Throws on its first call: the batch it is in rolls back and is applied record by record.
        participant->OnAction("Boom.v1", [this](Transaction& tx, const Command& c) {
            tx.Execute("INSERT INTO effect VALUES ($1::uuid, 'boom', 0)", {c.saga_id});
            if (++boom_calls == 1) throw std::runtime_error("boom");
            return StepReply::Success();
        });
        // Fails transiently on its first call, after writing: the write must not survive.
        participant->OnAction("Flaky.v1", [this](Transaction& tx, const Command& c) {
            tx.Execute("INSERT INTO effect VALUES ($1::uuid, 'flaky', 0)", {c.saga_id});
            RecordPlanner(tx);
            if (++flaky_calls == 1) return StepReply::Retry("provider unavailable");
            return StepReply::Success();
        });
        // Answers Retry without running any SQL (a provider's circuit open): its savepoint never
        // went out, and the handler before it in the batch must keep its writes.
        participant->OnAction("Busy.v1", [this](Transaction&, const Command&) {
            ++busy_calls;
            return StepReply::Retry("provider busy");
        });
        if (start) participant->Start();
    }

    void RecordPlanner(Transaction& tx) {
        const auto rows =
            tx.Query("SELECT current_setting('plan_cache_mode') || ' ' || current_setting('enable_seqscan')");
        const std::lock_guard lock{planner_mutex};
        planner_seen.push_back(rows.at(0).at(0).value_or("NULL"));
    }

    // Every handler so far ran the user's SQL with the server's planner settings.
    void CheckPlannerDefaults(std::size_t handlers) {
        const std::lock_guard lock{planner_mutex};
        CHECK(planner_seen.size() == handlers);
        for (const auto& seen : planner_seen) CHECK(seen == "auto on");
    }

    // Sends a command as the engine would (the same event id on a resend).
    void Send(const outbox::CloudEvent& command) const { testing::SendEvent(brokers, name + ".commands", command); }

    std::vector<outbox::CloudEvent> Replies(std::size_t expected) const {
        std::vector<outbox::CloudEvent> out;
        for (const auto& record : testing::ReadTopic(brokers, replies, expected, std::chrono::seconds(30))) {
            std::string reason;
            if (auto e = outbox::ParseCloudEvent(record.value, reason)) out.push_back(*e);
        }
        return out;
    }

    // The replies, by the id of the command each answers.
    std::map<std::string, outbox::CloudEvent> RepliesByCommand(std::size_t expected) const {
        std::map<std::string, outbox::CloudEvent> by_command;
        for (auto& reply : Replies(expected)) by_command[reply.correlation_id] = std::move(reply);
        return by_command;
    }

    std::string SvcUrl() const { return participant->DatabaseUrl(); }
};

outbox::CloudEvent MakeCommand(const std::string& saga_id,
                               const std::string& step,
                               const std::string& phase,
                               const std::string& type,
                               nlohmann::json data = nlohmann::json::object()) {
    return testing::SagaEvent(saga_id, step, phase, type, std::move(data));
}

}  // namespace

TEST_CASE("a command is applied once; its repeats get the stored reply with the same event id") {
    ParticipantRig rig;
    const auto saga = outbox::NewUuidV7();
    auto charge = MakeCommand(saga, "charge", "action", "Charge.v1", {{"amount", 42}});
    charge.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    charge.tracestate = "congo=t61rcWkgMzE";
    rig.Send(charge);
    const auto first = rig.Replies(1);
    REQUIRE(first.size() == 1);
    CHECK(first[0].correlation_id == charge.id);
    // The saga's trace context reaches the handler and goes back with the reply.
    CHECK(rig.charge_trace == charge.traceparent + " " + charge.tracestate);
    CHECK(first[0].traceparent == charge.traceparent);
    CHECK(first[0].tracestate == charge.tracestate);
    CHECK(first[0].data["outcome"] == "success");
    CHECK(first[0].data["charged"] == 42);
    CHECK(first[0].saga_id == saga);
    // The engine's resend after a timeout (same event id), twice, each answered before the next.
    rig.Send(charge);
    REQUIRE(rig.Replies(2).size() == 2);
    rig.Send(charge);
    const auto all = rig.Replies(3);
    REQUIRE(all.size() == 3);
    for (const auto& reply : all) {
        CHECK(reply.id == first[0].id);  // the stored reply, re-armed: same id, same data
        CHECK(reply.data == first[0].data);
    }
    CHECK(rig.charges == 1);
    rig.CheckPlannerDefaults(1);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM effect WHERE what = 'charge'") == 1);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM participant_step WHERE status = 'succeeded'") == 1);
    CHECK(rig.participant->Metrics().replayed >= 2);
    // Its compensation runs the handler (the action was applied), once.
    // (The repeat waits for the first reply: a repeat handled before its reply went out leaves
    // one reply, re-armed before it was ever sent.)
    const auto refund = MakeCommand(saga, "charge", "compensation", "Refund.v1");
    rig.Send(refund);
    REQUIRE(rig.Replies(4).size() == 4);
    rig.Send(refund);
    const auto with_refunds = rig.Replies(5);
    REQUIRE(with_refunds.size() == 5);
    CHECK(with_refunds[3].id == with_refunds[4].id);
    CHECK(with_refunds[3].correlation_id == refund.id);
    CHECK(rig.refunds == 1);
}

TEST_CASE("a compensation before its action is a null compensation, and the late action is refused") {
    ParticipantRig rig;
    const auto saga = outbox::NewUuidV7();
    const auto refund = MakeCommand(saga, "charge", "compensation", "Refund.v1");
    rig.Send(refund);
    const auto replies = rig.Replies(1);
    REQUIRE(replies.size() == 1);
    CHECK(replies[0].data["outcome"] == "success");
    CHECK(replies[0].data["nullCompensation"] == true);
    CHECK(rig.refunds == 0);  // nothing to undo: the handler does not run
    // The action arrives late (a slow network): refused, never applied.
    const auto charge = MakeCommand(saga, "charge", "action", "Charge.v1", {{"amount", 7}});
    rig.Send(charge);
    const auto both = rig.Replies(2);
    REQUIRE(both.size() == 2);
    CHECK(both[1].correlation_id == charge.id);
    CHECK(both[1].data["outcome"] == "failure");
    CHECK(both[1].data["reason"] == "the step was compensated before its action arrived");
    CHECK(rig.charges == 0);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM effect") == 0);
    const auto m = rig.participant->Metrics();
    CHECK(m.null_compensations == 1);
    CHECK(m.refused_late_actions == 1);
}

TEST_CASE("a Retry answer stores nothing and rolls back the handler's writes; the resend runs it again") {
    ParticipantRig rig;
    const auto saga = outbox::NewUuidV7();
    const auto flaky = MakeCommand(saga, "flaky", "action", "Flaky.v1");
    rig.Send(flaky);
    const auto first = rig.Replies(1);
    REQUIRE(first.size() == 1);
    CHECK(first[0].data["outcome"] == "retry");
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM effect") == 0);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM participant_step") == 0);
    rig.Send(flaky);  // the engine's resend: same event id, dropped by the inbox but answered
    const auto second = rig.Replies(2);
    REQUIRE(second.size() == 2);
    CHECK(second[1].data["outcome"] == "success");
    CHECK(rig.flaky_calls == 2);
    rig.CheckPlannerDefaults(2);  // the second in a new transaction
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM effect WHERE what = 'flaky'") == 1);
}

TEST_CASE("a command type without a handler is answered with a failure that names it, and not stored") {
    ParticipantRig rig;
    rig.Send(MakeCommand(outbox::NewUuidV7(), "ship", "action", "Ship.v1"));
    const auto replies = rig.Replies(1);
    REQUIRE(replies.size() == 1);
    CHECK(replies[0].data["outcome"] == "failure");
    CHECK(replies[0].data["reason"].get<std::string>().find("no handler for action Ship.v1") != std::string::npos);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM participant_step") == 0);
}

TEST_CASE("commands taken as one burst get the answers they get one by one") {
    ParticipantRig rig(false);
    // One partition, every command sent before the participant starts: its first poll takes them
    // together (the inbox rows of one transaction share their processed_at, checked below).
    outbox::EnsureTopicsBlocking(rig.brokers, {}, {rig.name + ".commands"}, 1);
    const auto a = outbox::NewUuidV7(), b = outbox::NewUuidV7(), c = outbox::NewUuidV7(), d = outbox::NewUuidV7();
    const auto a_charge = MakeCommand(a, "charge", "action", "Charge.v1", {{"amount", 5}});
    auto a_again = a_charge;
    a_again.id = outbox::NewUuidV7();  // the same phase under a new event id: passes the inbox
    const auto b_refund = MakeCommand(b, "charge", "compensation", "Refund.v1");
    const auto b_charge = MakeCommand(b, "charge", "action", "Charge.v1", {{"amount", 6}});
    const auto c_flaky = MakeCommand(c, "flaky", "action", "Flaky.v1");
    const auto d_charge = MakeCommand(d, "charge", "action", "Charge.v1", {{"amount", 8}});
    const auto d_refund = MakeCommand(d, "charge", "compensation", "Refund.v1");
    for (const auto& command : {a_charge, a_again, b_refund, b_charge, c_flaky, d_charge, d_refund}) rig.Send(command);
    rig.participant->Start();

    // a_again finds a_charge's stored reply not yet sent: that one reply answers both.
    const auto replies = rig.Replies(6);
    REQUIRE(replies.size() == 6);
    std::map<std::string, outbox::CloudEvent> by_command;
    std::vector<std::string> order;
    for (const auto& reply : replies) {
        by_command[reply.correlation_id] = reply;
        order.push_back(reply.correlation_id);
    }
    REQUIRE(by_command.size() == 6);
    CHECK(by_command[a_charge.id].data["charged"] == 5);
    CHECK(by_command.count(a_again.id) == 0);
    CHECK(by_command[b_refund.id].data["nullCompensation"] == true);
    CHECK(by_command[b_charge.id].data["outcome"] == "failure");
    CHECK(by_command[b_charge.id].data["reason"] == "the step was compensated before its action arrived");
    CHECK(by_command[c_flaky.id].data["outcome"] == "retry");
    CHECK(by_command[d_charge.id].data["charged"] == 8);
    CHECK(by_command[d_refund.id].data["outcome"] == "success");
    // Replies of a saga leave in the order of its commands.
    const auto at = [&](const std::string& id) { return std::find(order.begin(), order.end(), id) - order.begin(); };
    CHECK(at(b_refund.id) < at(b_charge.id));
    CHECK(at(d_charge.id) < at(d_refund.id));
    // Effects: a and d charged once each, d refunded, nothing for b, c's write rolled back.
    CHECK(rig.charges == 2);
    CHECK(rig.refunds == 1);
    rig.CheckPlannerDefaults(3);  // a; c, its savepoint after a's; d, after c's rollback to its own
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM effect") == 3);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM effect WHERE saga_id = '" + b + "' OR what = 'flaky'") == 0);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM participant_step") == 5);  // a, b (2), d (2); not c
    const auto m = rig.participant->Metrics();
    CHECK(m.applied == 3);
    CHECK(m.replayed == 1);
    CHECK(m.null_compensations == 1);
    CHECK(m.refused_late_actions == 1);
    CHECK(m.retries == 1);
    CHECK(Count(rig.SvcUrl(), "SELECT count(DISTINCT processed_at) FROM processed_event") < 7);
}

TEST_CASE("a handler that runs no SQL and answers Retry in a batch leaves the handler before it applied") {
    ParticipantRig rig(false);
    outbox::EnsureTopicsBlocking(rig.brokers, {}, {rig.name + ".commands"}, 1);
    const auto x = outbox::NewUuidV7(), y = outbox::NewUuidV7(), z = outbox::NewUuidV7(), w = outbox::NewUuidV7();
    // x runs without a savepoint (the batch's first), y in one, z's is never sent, w releases y's.
    const auto x_charge = MakeCommand(x, "charge", "action", "Charge.v1", {{"amount", 1}});
    const auto y_charge = MakeCommand(y, "charge", "action", "Charge.v1", {{"amount", 2}});
    const auto z_busy = MakeCommand(z, "busy", "action", "Busy.v1");
    const auto w_charge = MakeCommand(w, "charge", "action", "Charge.v1", {{"amount", 4}});
    for (const auto& command : {x_charge, y_charge, z_busy, w_charge}) rig.Send(command);
    rig.participant->Start();
    auto by_command = rig.RepliesByCommand(4);
    REQUIRE(by_command.size() == 4);
    CHECK(by_command[x_charge.id].data["charged"] == 1);
    CHECK(by_command[y_charge.id].data["charged"] == 2);
    CHECK(by_command[z_busy.id].data["outcome"] == "retry");
    CHECK(by_command[w_charge.id].data["charged"] == 4);
    CHECK(rig.busy_calls == 1);
    CHECK(rig.charges == 3);
    rig.CheckPlannerDefaults(3);
    // Every charge that was answered is there, y's too: z's Retry rolled nothing back.
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM effect WHERE what = 'charge'") == 3);
    CHECK(Count(rig.SvcUrl(), "SELECT sum(amount) FROM effect WHERE what = 'charge'") == 7);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM participant_step") == 3);
    // One transaction for all four (the inbox rows share its start time).
    CHECK(Count(rig.SvcUrl(), "SELECT count(DISTINCT processed_at) FROM processed_event") == 1);
}

TEST_CASE("a batch that rolls back and is applied record by record counts each command once") {
    ParticipantRig rig(false);
    outbox::EnsureTopicsBlocking(rig.brokers, {}, {rig.name + ".commands"}, 1);
    const auto a = outbox::NewUuidV7(), b = outbox::NewUuidV7();
    rig.Send(MakeCommand(a, "charge", "action", "Charge.v1", {{"amount", 5}}));
    rig.Send(MakeCommand(b, "boom", "action", "Boom.v1"));
    rig.participant->Start();
    REQUIRE(rig.Replies(2).size() == 2);
    CHECK(rig.charges == 2);  // the handler ran in the batch that rolled back, then on its own
    CHECK(rig.boom_calls == 2);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM effect") == 2);  // one charge, one boom
    // The metrics count what committed: the rolled-back batch's charge is not counted.
    CHECK(WaitFor([&] { return rig.participant->Metrics().applied >= 2; }, std::chrono::seconds(10)));
    CHECK(rig.participant->Metrics().applied == 2);
}

TEST_CASE("a Retry from a batch's first handler (no savepoint) applies the batch again, without calling it twice") {
    ParticipantRig rig(false);
    outbox::EnsureTopicsBlocking(rig.brokers, {}, {rig.name + ".commands"}, 1);
    const auto a = outbox::NewUuidV7(), b = outbox::NewUuidV7();
    const auto flaky = MakeCommand(a, "flaky", "action", "Flaky.v1");
    const auto charge = MakeCommand(b, "charge", "action", "Charge.v1", {{"amount", 7}});
    rig.Send(flaky);
    rig.Send(charge);
    rig.participant->Start();
    auto by_command = rig.RepliesByCommand(2);
    REQUIRE(by_command.size() == 2);
    CHECK(by_command[flaky.id].data["outcome"] == "retry");
    CHECK(by_command[charge.id].data["charged"] == 7);
    // The flaky handler ran once: its Retry rolled the first attempt back (its write with it, before
    // the charge ran) and was given again in the second, which ran the charge once.
    CHECK(rig.flaky_calls == 1);
    CHECK(rig.charges == 1);
    rig.CheckPlannerDefaults(2);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM effect WHERE what = 'flaky'") == 0);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM effect WHERE what = 'charge'") == 1);
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM participant_step") == 1);
    // Still one transaction for both (the inbox rows share its start time), not record by record.
    CHECK(Count(rig.SvcUrl(), "SELECT count(*) FROM processed_event") == 2);
    CHECK(Count(rig.SvcUrl(), "SELECT count(DISTINCT processed_at) FROM processed_event") == 1);
    CHECK(WaitFor([&] { return rig.participant->Metrics().applied >= 1; }, std::chrono::seconds(10)));
    const auto m = rig.participant->Metrics();
    CHECK(m.applied == 1);
    CHECK(m.retries == 1);
    // The engine's resend (same event id): dropped by the inbox, answered by running the handler.
    rig.Send(flaky);
    int successes = 0;
    for (const auto& reply : rig.Replies(3)) {
        if (reply.correlation_id == flaky.id && reply.data["outcome"] == "success") ++successes;
    }
    CHECK(successes == 1);
    CHECK(rig.flaky_calls == 2);
}

TEST_CASE("a backlog is taken in transactions of at most 64 commands (each handler is a subtransaction)") {
    ParticipantRig rig(false);
    outbox::EnsureTopicsBlocking(rig.brokers, {}, {rig.name + ".commands"}, 1);
    const int backlog = 150;
    for (int i = 0; i < backlog; ++i) {
        rig.Send(MakeCommand(outbox::NewUuidV7(), "charge", "action", "Charge.v1", {{"amount", i}}));
    }
    rig.participant->Start();
    REQUIRE(rig.Replies(backlog).size() == static_cast<std::size_t>(backlog));
    CHECK(rig.charges == backlog);
    // The inbox rows of one transaction share their processed_at (its start time).
    const auto largest =
        Count(rig.SvcUrl(), "SELECT max(n) FROM (SELECT count(*) AS n FROM processed_event GROUP BY processed_at) t");
    MESSAGE("largest transaction: " << largest << " commands");
    CHECK(largest <= 64);
    CHECK(largest > 1);  // still batched
}

TEST_CASE("a participant's inbox forgets event ids past its TTL, and only those") {
    ParticipantRig rig(/*start=*/false, std::chrono::hours(48));
    {
        pqxx::connection conn{rig.db.Url()};
        pqxx::nontransaction{conn}.exec("CREATE SCHEMA svc");
    }
    store::MigrateBlocking(rig.SvcUrl(), store::BuiltinMigrations());
    {
        pqxx::connection conn{rig.SvcUrl()};
        pqxx::work tx{conn};
        for (const char* age : {"49 hours", "49 hours", "72 hours", "47 hours", "1 minute"}) {
            tx.exec_params(
                "INSERT INTO processed_event (consumer_name, event_id, processed_at) VALUES ('c', $1::uuid, "
                "now() - $2::interval)",
                outbox::NewUuidV7(),
                std::string(age));
        }
        tx.commit();
    }
    rig.participant->Start();  // sweeps at once, then daily
    CHECK(WaitFor([&] { return Count(rig.SvcUrl(), "SELECT count(*) FROM processed_event") == 2; },
                  std::chrono::seconds(15)));
    CHECK(Count(rig.SvcUrl(),
                "SELECT count(*) FROM processed_event WHERE processed_at > now() - interval '48 hours'") == 2);
}

TEST_CASE("a participant refuses an inbox TTL outside 24-72 hours, naming the rule") {
    for (const int hours : {12, 96}) {
        CAPTURE(hours);
        ParticipantRig rig(/*start=*/false, std::chrono::hours(hours));
        try {
            rig.participant->Start();
            FAIL("Start() accepted an inbox TTL of " << hours << " h");
        } catch (const std::invalid_argument& e) {
            CHECK(std::string(e.what()).find("R-DIST-IDEM-5") != std::string::npos);
            CHECK(std::string(e.what()).rfind("ParticipantConfig::inbox_ttl: ", 0) == 0);
        }
    }
}
