// The demo's scenario against the real broker: `sagaflow demo --kafka` must exit 0 with the
// invariant line, and the tables must show it independently, including the double protection of
// rule X3 (one order started under two idempotency keys: one payment row, both sagas completed with
// the same payment).
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <pqxx/pqxx>

#include "outbox/writer.hpp"
#include "tests/support/example_rig.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/services.hpp"
#include "tools/audit.hpp"
#include "tools/child_process.hpp"

using namespace sagaflow;

namespace {

// Runs `sagaflow demo` against the real broker on `db`, with `extra` flags; its exit status and output.
// With `while_running`, the demo runs with --keep-running: once it has printed its result and the
// console's URL, `while_running(port)` is called, then the demo gets SIGTERM.
std::pair<int, std::string> RunDemo(const testing::ScratchDatabase& db,
                                    const std::vector<std::string>& extra,
                                    const std::function<void(int)>& while_running = {}) {
    const std::string source = std::getenv("SAGAFLOW_SOURCE_DIR");
    const char* services = std::getenv("SAGAFLOW_SERVICES_BIN");
    REQUIRE_MESSAGE(services != nullptr, "SAGAFLOW_SERVICES_BIN is not set: run this test through ctest");
    const std::string log = "/tmp/" + testing::UniqueName("demo") + ".log";
    std::vector<std::string> args{"demo",
                                  "--db",
                                  db.Url(),
                                  "--kafka",
                                  testing::KafkaBrokers(),
                                  "--saga",
                                  source + "/sagas/order-payment.yaml",
                                  "--services-dir",
                                  services};
    args.insert(args.end(), extra.begin(), extra.end());
    if (while_running) args.emplace_back("--keep-running");
    int status = 0;
    {
        detail::ChildProcess demo{testing::SagaflowCli(), args, log};
        int raw = 0;
        if (while_running) {
            const bool kept = testing::WaitFor(
                [&] {
                    return testing::ReadFile(log).find("Ctrl-C ends the demo") != std::string::npos || !demo.Running();
                },
                std::chrono::seconds(300));
            const std::string output = testing::ReadFile(log);
            const auto at = output.find("console: http://127.0.0.1:");
            REQUIRE_MESSAGE(kept, output);
            REQUIRE_MESSAGE(at != std::string::npos, output);
            while_running(std::stoi(output.substr(at + std::string("console: http://127.0.0.1:").size())));
            raw = demo.KillAndWait(SIGTERM);
        } else {
            raw = demo.Wait();
        }
        status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    }
    std::string output = testing::ReadFile(log);
    std::remove(log.c_str());
    return {status, std::move(output)};
}

}  // namespace

TEST_CASE("the order-payment demo against the real broker keeps the money invariant") {
    testing::ScratchDatabase db;
    // With --keep-running the engine stays up after the run, its console on the printed port: a
    // newcomer clicks through the demo's sagas (loopback without tokens: an operator).
    long long listed = -1, in_database = -1;
    const auto [status, output] = RunDemo(db, {"--sagas", "20"}, [&](int port) {
        CHECK(testing::HttpRequest(port, "GET", "/ui/").status == 200);
        const auto page = testing::HttpRequest(port, "GET", "/v1/sagas?limit=500");
        REQUIRE(page.status == 200);
        listed = static_cast<long long>(page.Json()["items"].size());
        in_database = testing::Count(db.Url(), "SELECT count(*) FROM saga_instance");
    });
    INFO(output);
    CHECK(status == 0);
    CHECK(output.find("money invariant holds") != std::string::npos);
    CHECK(listed == in_database);
    CHECK(listed > 20);

    pqxx::connection conn{db.Url()};
    pqxx::read_transaction tx{conn};
    // Nothing open, nothing parked.
    CHECK(tx.exec1("SELECT count(*) FROM saga_instance WHERE status NOT IN ('completed', 'compensated')")[0]
              .as<long long>() == 0);
    // Money: at most one payment per order and per (provider, external id); refunds only for
    // compensated sagas, one per payment.
    CHECK(tx.exec1("SELECT count(*) FROM (SELECT order_id FROM payments.payment GROUP BY order_id HAVING count(*) > 1) "
                   "d")[0]
              .as<long long>() == 0);
    CHECK(tx.exec1("SELECT count(*) FROM payments.refund r JOIN saga_instance s ON s.saga_id = r.saga_id WHERE "
                   "s.status <> 'compensated'")[0]
              .as<long long>() == 0);
    // X3: two sagas for one order under two keys, both completed, one payment, the same paymentId.
    const auto pair = tx.exec(
        "SELECT d.order_id, d.sagas, d.payment_ids, d.all_completed, (SELECT count(*) FROM payments.payment p WHERE "
        "p.order_id = d.order_id) FROM (SELECT s.input->>'orderId' AS order_id, count(*) AS sagas, count(DISTINCT "
        "s.data->>'paymentId') AS payment_ids, bool_and(s.status = 'completed') AS all_completed FROM saga_instance s "
        "GROUP BY 1 HAVING count(*) > 1) d");
    REQUIRE(pair.size() == 1);
    CHECK(pair[0][1].as<long long>() == 2);
    CHECK(pair[0][2].as<long long>() == 1);
    CHECK(pair[0][3].as<bool>());
    CHECK(pair[0][4].as<long long>() == 1);
    // The saga cancelled while its charge was in flight: its charge refunded once, no other refund.
    CHECK(tx.exec1("SELECT count(*) FROM payments.refund")[0].as<long long>() == 1);
    // The slow provider's saga: its first attempt timed out, the resend waited while the payment
    // service was busy with the first delivery, and it completed with one charge.
    const auto slow_row = tx.exec1(
        "SELECT s.status, (SELECT count(*) FROM payments.payment p WHERE p.saga_id = s.saga_id), (SELECT count(*) "
        "FROM saga_timeline e WHERE e.saga_id = s.saga_id AND e.kind = 'timeout'), (SELECT count(*) FROM saga_timeline "
        "e "
        "WHERE e.saga_id = s.saga_id AND e.kind = 'waiting-for-participant') FROM saga_instance s WHERE "
        "s.input->>'orderId' LIKE '%-slow'");
    CHECK(slow_row[0].as<std::string>() == "completed");
    CHECK(slow_row[1].as<long long>() == 1);
    CHECK(slow_row[2].as<long long>() >= 1);
    CHECK(slow_row[3].as<long long>() >= 1);
    const auto cancelled = tx.exec1(
        "SELECT s.status, (SELECT count(*) FROM payments.payment p WHERE p.saga_id = s.saga_id), (SELECT count(*) "
        "FROM payments.refund r WHERE r.saga_id = s.saga_id), (SELECT count(*) FROM saga_timeline e WHERE e.saga_id = "
        "s.saga_id AND e.kind = 'cancelled') FROM saga_instance s WHERE s.input->>'orderId' LIKE '%-cancelled'");
    CHECK(cancelled[0].as<std::string>() == "compensated");
    CHECK(cancelled[1].as<long long>() == 1);
    CHECK(cancelled[2].as<long long>() == 1);
    CHECK(cancelled[3].as<long long>() == 1);
    // Every declined order was cancelled and never charged.
    CHECK(tx.exec1("SELECT count(*) FROM orders.orders WHERE amount > 500 AND status <> 'cancelled'")[0]
              .as<long long>() == 0);
    tx.commit();

    // The audit passes on what the demo left, and fails, check by check, on each kind of damage.
    AuditOptions options;
    options.db_url = db.Url();
    options.participant_schemas = {"orders", "payments"};
    options.payments_schema = "payments";
    const auto clean = AuditBlocking(options);
    INFO(clean.Summary());
    REQUIRE(clean.Ok());
    CHECK(clean.checks.size() == 8);
    {
        // A schema whose name holds a quote, a semicolon and a double quote is only a name to the
        // audit: the orders schema copied under it, audited beside the others, holds as they do.
        const std::string odd = "o'dd; DROP TABLE saga_instance; --\"x";
        pqxx::work w{conn};
        const std::string schema = w.quote_name(odd);
        w.exec("CREATE SCHEMA " + schema);
        for (const std::string table : {"participant_step", "processed_event", "outbox"}) {
            w.exec("CREATE TABLE " + schema + "." + table + " (LIKE orders." + table + " INCLUDING ALL)");
            w.exec("INSERT INTO " + schema + "." + table + " OVERRIDING SYSTEM VALUE SELECT * FROM orders." + table);
        }
        w.commit();
        auto with_odd = options;
        with_odd.participant_schemas.push_back(odd);
        const auto report = AuditBlocking(with_odd);
        INFO(report.Summary());
        CHECK(report.Ok());
        CHECK(testing::Count(db.Url(), "SELECT count(*) FROM saga_instance") > 0);
    }
    const auto violations = [&](const std::string& check) {
        for (const auto& c : AuditBlocking(options).checks) {
            if (c.name == check) return c.violations;
        }
        return -1LL;
    };
    // The cancelled saga: compensated, with a charge and its refund.
    const std::string victim = [&] {
        pqxx::read_transaction rtx{conn};
        return rtx.exec1("SELECT saga_id::text FROM saga_instance WHERE input->>'orderId' LIKE '%-cancelled'")[0]
            .as<std::string>();
    }();
    const auto damage = [&](const std::string& check, const std::string& break_sql, const std::string& repair_sql) {
        CAPTURE(check);
        {
            pqxx::work w{conn};
            w.exec(break_sql);
            w.commit();
        }
        CHECK(violations(check) >= 1);
        {
            pqxx::work w{conn};
            w.exec(repair_sql);
            w.commit();
        }
        CHECK(violations(check) == 0);
    };
    damage("terminal-or-live",
           "UPDATE saga_instance SET status = 'running' WHERE saga_id = '" + victim + "'",
           "UPDATE saga_instance SET status = 'compensated' WHERE saga_id = '" + victim + "'");
    // Neither is a foreign key any more (sql/013): the audit checks them.
    damage("terminal-or-live",
           "UPDATE saga_instance SET definition_hash = 'gone' WHERE saga_id = '" + victim + "'",
           "UPDATE saga_instance SET definition_hash = (SELECT hash FROM saga_definition WHERE saga_type = "
           "'order-payment') WHERE saga_id = '" +
               victim + "'");
    damage("terminal-or-live",
           "INSERT INTO saga_step (saga_id, step_name, phase, status, command_event_id) VALUES "
           "(gen_random_uuid(), 'create-order', 'action', 'succeeded', gen_random_uuid())",
           "DELETE FROM saga_step s WHERE NOT EXISTS (SELECT 1 FROM saga_instance i WHERE i.saga_id = s.saga_id)");
    damage("dispatch-once",
           "INSERT INTO outbox (event_id, topic, message_key, payload, published_at) SELECT gen_random_uuid(), topic, "
           "message_key, payload, now() FROM outbox WHERE message_key = '" +
               victim +
               "' AND payload->>'stepname' = "
               "'create-order' AND payload->>'phase' = 'action'",
           "DELETE FROM outbox WHERE message_key = '" + victim +
               "' AND payload->>'stepname' = 'create-order' AND "
               "payload->>'phase' = 'action' AND event_id NOT IN (SELECT command_event_id FROM saga_step)");
    damage("apply-once",
           "UPDATE payments.processed_event SET event_id = gen_random_uuid() WHERE event_id = (SELECT command_event_id "
           "FROM payments.participant_step WHERE saga_id = '" +
               victim + "' AND phase = 'compensation')",
           "INSERT INTO payments.processed_event (consumer_name, event_id) SELECT 'sagaflow-participant-payment', "
           "command_event_id FROM payments.participant_step WHERE saga_id = '" +
               victim +
               "' AND phase = "
               "'compensation'");
    damage("compensation",
           "UPDATE saga_step SET dispatched_at = dispatched_at - interval '1 hour' WHERE saga_id = '" + victim +
               "' AND step_name = 'create-order' AND phase = 'compensation'",
           "UPDATE saga_step SET dispatched_at = dispatched_at + interval '1 hour' WHERE saga_id = '" + victim +
               "' AND step_name = 'create-order' AND phase = 'compensation'");
    damage("no-hanging",
           "UPDATE payments.participant_step SET applied_at = applied_at + interval '1 hour' WHERE saga_id = '" +
               victim + "' AND phase = 'action'",
           "UPDATE payments.participant_step SET applied_at = applied_at - interval '1 hour' WHERE saga_id = '" +
               victim + "' AND phase = 'action'");
    damage("outbox",
           "UPDATE outbox SET published_at = NULL, created_at = created_at - interval '2 hours' WHERE message_key = '" +
               victim + "' AND payload->>'stepname' = 'create-order' AND payload->>'phase' = 'action'",
           "UPDATE outbox SET published_at = now(), created_at = created_at + interval '2 hours' WHERE message_key = "
           "'" +
               victim + "' AND payload->>'stepname' = 'create-order' AND payload->>'phase' = 'action'");
    // A resend re-arms a row created long ago: it is late only once it waited longer than the grace
    // since the re-arm (it used to count as unpublished since its creation).
    {
        const std::string command = "SELECT event_id::text FROM outbox WHERE message_key = '" + victim +
                                    "' AND payload->>'stepname' = 'create-order' AND payload->>'phase' = 'action'";
        pqxx::work w{conn};
        w.exec("UPDATE outbox SET created_at = created_at - interval '2 hours' WHERE event_id::text = (" + command +
               ")");
        REQUIRE(outbox::Rearm(w, w.exec1(command)[0].as<std::string>()));
        w.commit();
    }
    CHECK(violations("outbox") == 0);
    damage("outbox",
           "UPDATE outbox SET next_attempt_at = next_attempt_at - interval '2 minutes' WHERE message_key = '" + victim +
               "' AND published_at IS NULL",
           "UPDATE outbox SET published_at = now(), created_at = created_at + interval '2 hours' WHERE message_key = "
           "'" +
               victim + "' AND published_at IS NULL");
    // A participant record marked succeeded with no command id: only tombstones have none.
    damage("apply-once",
           "UPDATE payments.participant_step SET command_event_id = NULL WHERE saga_id = '" + victim +
               "' AND phase = 'action'",
           "UPDATE payments.participant_step ps SET command_event_id = s.command_event_id FROM saga_step s WHERE "
           "s.saga_id = ps.saga_id AND s.step_name = ps.step_name AND s.phase = ps.phase AND ps.saga_id = '" +
               victim + "' AND ps.phase = 'action'");
    // A forged charge for a saga the engine never started: record, inbox row, payment.
    const std::string forged =
        "WITH f AS (SELECT gen_random_uuid() AS saga_id, gen_random_uuid() AS command_id), r AS (INSERT INTO "
        "payments.participant_step (saga_id, step_name, phase, command_type, command_event_id, status, reply, "
        "applied_at) SELECT saga_id, 'charge-payment', 'action', 'ChargePayment.v1', command_id, 'succeeded', "
        "'{\"outcome\":\"success\"}', now() - interval 'AGE' FROM f RETURNING 1), i AS (INSERT INTO "
        "payments.processed_event (consumer_name, event_id) SELECT 'forger', command_id FROM f RETURNING 1) INSERT "
        "INTO payments.payment (saga_id, order_id, customer_id, amount, currency, payment_provider, "
        "external_payment_id, status, created_at) SELECT saga_id, 'forged', 1, 900, 'EUR', 'forged', "
        "gen_random_uuid()::text, 'charged', now() - interval 'AGE' FROM f";
    const auto aged = [&](const std::string& age) {
        std::string sql = forged;
        for (std::size_t at; (at = sql.find("AGE")) != std::string::npos;) sql.replace(at, 3, age);
        return sql;
    };
    const std::string unforge =
        "DELETE FROM payments.participant_step p WHERE NOT EXISTS (SELECT 1 FROM saga_instance i WHERE i.saga_id = "
        "p.saga_id); DELETE FROM payments.payment p WHERE NOT EXISTS (SELECT 1 FROM saga_instance i WHERE i.saga_id "
        "= p.saga_id); DELETE FROM payments.processed_event WHERE consumer_name = 'forger'";
    damage("known-saga", aged("1 minute"), unforge);
    CHECK(violations("known-saga") == 0);
    {
        // Older than the shortest history retention: perhaps a pruned saga's, a warning only.
        pqxx::work w{conn};
        w.exec(aged("4 days"));
        w.commit();
        const auto report = AuditBlocking(options);
        CHECK(report.Ok());
        CHECK(report.unmatched_old_records == 2);  // the record and the payment
        CHECK(report.Summary().find("warning: 2 participant record(s) or payment(s)") != std::string::npos);
        pqxx::work repair{conn};
        repair.exec(unforge);
        repair.commit();
    }
    {
        pqxx::work w{conn};
        w.exec("ALTER TABLE payments.payment DROP CONSTRAINT payment_payment_provider_external_payment_id_key");
        w.commit();
    }
    damage("money",
           "INSERT INTO payments.payment (saga_id, order_id, customer_id, amount, currency, payment_provider, "
           "external_payment_id, status) SELECT gen_random_uuid(), order_id, customer_id, amount, currency, "
           "payment_provider, external_payment_id, 'charged' FROM payments.payment WHERE saga_id = '" +
               victim + "'",
           "DELETE FROM payments.payment p WHERE NOT EXISTS (SELECT 1 FROM saga_instance i WHERE i.saga_id = "
           "p.saga_id)");
}

TEST_CASE("the demo with the TypeScript payment service keeps the money invariant") {
    // ./scripts/demo --payment-service node, on the test's broker: the same scenario (declines, slow
    // charges, a cancel mid-charge, duplicated commands, the payment service killed and restarted).
    testing::ScratchDatabase db;
    const auto [status, output] = RunDemo(
        db,
        {"--sagas", "15", "--payment-service", "node", "--node-service", testing::RequiredEnv("SAGAFLOW_PAYMENT_TS")});
    INFO(output);
    CHECK(status == 0);
    CHECK(output.find("TypeScript payment service (schema payments) started") != std::string::npos);
    CHECK(output.find("money invariant holds") != std::string::npos);
    CHECK(testing::Count(db.Url(), "SELECT count(*) FROM payments.participant_step") > 0);  // the TypeScript one's
}

TEST_CASE("the engine and both example services run from configuration files alone") {
    // Each process gets `--config FILE` and nothing else: db.url and kafka.brokers come from
    // SAGAFLOW_DB_URL / SAGAFLOW_KAFKA_BROKERS (the override of single keys), the definition from
    // engine.sagas relative to the file, the API tokens from a file and a variable.
    testing::ExampleRig rig;
    const std::string dir = rig.LogDir();
    std::ofstream(dir + "/shop.token") << "cfg-shop-token\n";
    std::ofstream(dir + "/engine.yaml") << "kafka:\n  replies_topic: " << rig.Replies()
                                        << "\n  consumer_properties:\n    session.timeout.ms: 6000\n"
                                           "engine:\n  consumer_group: "
                                        << rig.EngineGroup()
                                        << "\n  instance_id: cfg-engine\n  sagas: [order-payment.yaml]\n"
                                           "http:\n  listen: 127.0.0.1:0\n  tokens:\n    shop: {file: shop.token}\n"
                                           "    operator-ops: {env: CFG_OPS_TOKEN}\n";
    const auto service_config = [&](const std::string& file, const std::string& name, const std::string& schema) {
        std::ofstream(dir + "/" + file) << "kafka:\n  replies_topic: " << rig.Replies()
                                        << "\n  consumer_properties:\n    session.timeout.ms: 6000\n"
                                           "participant:\n  name: "
                                        << name << "\n  schema: " << schema << "\n";
    };
    service_config("order.yaml", rig.OrderName(), "orders");
    service_config("payment.yaml", rig.PaymentName(), "payments");
    const std::vector<std::string> env{
        "SAGAFLOW_DB_URL=" + rig.DbUrl(), "SAGAFLOW_KAFKA_BROKERS=" + rig.Brokers(), "CFG_OPS_TOKEN=cfg-ops-token"};
    const std::string bin = testing::RequiredEnv("SAGAFLOW_SERVICES_BIN");
    detail::ChildProcess engine{
        testing::SagaflowCli(), {"run", "--config", dir + "/engine.yaml"}, dir + "/engine.log", env};
    detail::ChildProcess order{
        bin + "/sagaflow-order-service", {"--config", dir + "/order.yaml"}, dir + "/order.log", env};
    detail::ChildProcess payment{
        bin + "/sagaflow-payment-service", {"--config", dir + "/payment.yaml"}, dir + "/payment.log", env};
    const auto read = [](const std::string& path) { return testing::ReadFile(path); };
    const int port = testing::WaitForHttpPort(dir + "/engine.log", std::chrono::seconds(60));
    REQUIRE_MESSAGE(port != 0, read(dir + "/engine.log"));

    const std::string body = testing::ExampleRig::Input("cfg-order-1", "120.00").dump();
    CHECK(testing::HttpRequest(port,
                               "POST",
                               "/v1/sagas/order-payment",
                               {{"Idempotency-Key", "cfg-1"}, {"Content-Type", "application/json"}},
                               body)
              .status == 401);
    const auto started = testing::HttpRequest(port,
                                              "POST",
                                              "/v1/sagas/order-payment",
                                              {{"Authorization", "Bearer cfg-shop-token"},
                                               {"Idempotency-Key", "cfg-1"},
                                               {"Content-Type", "application/json"}},
                                              body);
    REQUIRE_MESSAGE(started.status == 201, started.body);
    const std::string saga_id = started.Json()["sagaId"];
    std::string status;
    CHECK(testing::WaitFor(
        [&] {
            const auto view =
                testing::HttpRequest(port, "GET", "/v1/sagas/" + saga_id, {{"Authorization", "Bearer cfg-ops-token"}});
            status = view.status == 200 ? view.Json()["status"].get<std::string>() : std::to_string(view.status);
            return status == "completed";
        },
        std::chrono::seconds(60)));
    INFO("engine log:\n" << read(dir + "/engine.log") << "\npayment log:\n" << read(dir + "/payment.log"));
    CHECK(status == "completed");
    CHECK(testing::Count(rig.DbUrl(),
                         "SELECT count(*) FROM payments.payment WHERE external_payment_id = 'cfg-order-1'") == 1);
    CHECK(testing::Count(rig.DbUrl(),
                         "SELECT count(*) FROM orders.orders WHERE order_id = 'cfg-order-1' AND status = "
                         "'approved'") == 1);
    CHECK(testing::Count(rig.DbUrl(), "SELECT count(*) FROM saga_instance WHERE saga_type = 'order-payment'") == 1);

    // The embedding example reads the same kind of file through Config::FromFile: with the daemon
    // stopped, its in-process engine runs the next saga to the end.
    engine.KillAndWait(SIGTERM);
    std::ofstream(dir + "/embed.yaml") << "kafka:\n  replies_topic: " << rig.Replies()
                                       << "\nengine:\n  consumer_group: " << rig.EngineGroup()
                                       << "\n  instance_id: cfg-embedded\n  sagas: [order-payment.yaml]\n";
    int embedded_status = -1;
    {
        detail::ChildProcess embedded{testing::RequiredEnv("SAGAFLOW_EMBEDDING_EXAMPLE"),
                                      {"--config", dir + "/embed.yaml", "cfg-order-2"},
                                      dir + "/embedded.log",
                                      env};
        const int raw = embedded.Wait();
        embedded_status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    }
    INFO("embedded log:\n" << read(dir + "/embedded.log"));
    CHECK(embedded_status == 0);
    CHECK(testing::Count(rig.DbUrl(),
                         "SELECT count(*) FROM saga_instance WHERE idempotency_key = 'embedding-example-cfg-order-2' "
                         "AND status = 'completed'") == 1);
    CHECK(testing::Count(rig.DbUrl(),
                         "SELECT count(*) FROM payments.payment WHERE external_payment_id = 'cfg-order-2'") == 1);

    // The secrets are in no log.
    for (const auto& log : {"engine.log", "order.log", "payment.log", "embedded.log"}) {
        const std::string text = read(dir + "/" + log);
        CHECK_MESSAGE(text.find("cfg-shop-token") == std::string::npos, log);
        CHECK_MESSAGE(text.find("cfg-ops-token") == std::string::npos, log);
    }
}
