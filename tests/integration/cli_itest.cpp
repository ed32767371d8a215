// The sagaflow CLI's maintenance commands against a real PostgreSQL: what an operator runs by
// hand or from cron.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "engine/repository/retention.hpp"
#include "tests/support/services.hpp"

using sagaflow::testing::CliRun;
using sagaflow::testing::Count;
using sagaflow::testing::RunCli;
using sagaflow::testing::SagaRowCount;
using sagaflow::testing::ScratchDatabase;

TEST_CASE("sweep and audit against a database without sagaflow's tables say to migrate first, and create nothing") {
    ScratchDatabase db;
    for (const std::string command : {"sweep", "audit"}) {
        CAPTURE(command);
        const CliRun run = RunCli(command + " --db '" + db.Url() + "'");
        CHECK(run.code == 1);
        CHECK(run.err.find("does not exist") != std::string::npos);
        CHECK(run.err.find("Hint: this database has no sagaflow schema yet") != std::string::npos);
        CHECK(run.err.find("run `sagaflow migrate --db URL` first") != std::string::npos);
        CHECK(run.err.find("LINE 1") == std::string::npos);  // PostgreSQL's pointer into our SQL is not for users
    }
    CHECK(Count(db.Url(), "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == 0);

    // Migrated, the same commands succeed.
    REQUIRE(RunCli("migrate --db '" + db.Url() + "'").code == 0);
    const CliRun sweep = RunCli("sweep --db '" + db.Url() + "'");
    CHECK(sweep.code == 0);
    CHECK(sweep.out.find("deleted 0 processed_event") != std::string::npos);
}

TEST_CASE("migrate creates the schema a URL's search_path names (a participant's tables), or says how to") {
    ScratchDatabase db;
    const std::string url = db.Url() + (db.Url().find('?') == std::string::npos ? "?" : "&");
    const CliRun run = RunCli("migrate --db '" + url + "options=-csearch_path%3Dpayments'");
    INFO(run.err);
    CHECK(run.code == 0);
    CHECK(Count(db.Url(),
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'payments' AND tablename IN ('processed_event', "
                "'participant_step', 'outbox')") == 3);
    const CliRun bad = RunCli("migrate --db '" + url + "options=-csearch_path%3DNo-Such'");
    CHECK(bad.code == 1);
    CHECK(bad.err.find("names no schema that exists. Hint:") != std::string::npos);
}

namespace {

// A saga of `type` with `status`, created `created_days` and last changed `ended_days` ago, with
// two step rows and three timeline entries. Returns its id.
std::string AddSaga(
    const std::string& url, const std::string& type, const std::string& status, int created_days, int ended_days) {
    pqxx::connection conn{url};
    pqxx::work tx{conn};
    const std::string id = tx.exec1("SELECT gen_random_uuid()::text")[0].as<std::string>();
    tx.exec_params(
        "INSERT INTO saga_instance (saga_id, saga_type, definition_version, definition_hash, status, "
        "input, created_at, updated_at) VALUES ($1::uuid, $2, 1, 'h', $3, '{}', now() - make_interval(days "
        "=> $4), now() - make_interval(days => $5))",
        id,
        type,
        status,
        created_days,
        ended_days);
    for (const std::string step : {"one", "two"}) {
        tx.exec_params(
            "INSERT INTO saga_step (saga_id, step_name, phase, status, command_event_id) VALUES ($1::uuid, "
            "$2, 'action', 'succeeded', gen_random_uuid())",
            id,
            step);
    }
    tx.exec_params(
        // Three entries in two rows: the second row holds two (015's `later`), as a reply and the
        // dispatch after it are written.
        "INSERT INTO saga_event (saga_id, kind, at, later) SELECT $1::uuid, 'k', now() - make_interval(days => $2), "
        "CASE WHEN i = 2 THEN '[{\"kind\": \"dispatched\", \"step_name\": \"s\"}]'::jsonb END "
        "FROM generate_series(1, 2) i",
        id,
        ended_days);
    tx.commit();
    return id;
}

}  // namespace

TEST_CASE(
    "prune deletes finished sagas that ended before the horizon, with their steps and timeline, and nothing else") {
    ScratchDatabase db;
    const std::string url = db.Url();
    REQUIRE(RunCli("migrate --db '" + url + "'").code == 0);
    sagaflow::testing::Execute(url,
                               "INSERT INTO saga_definition (saga_type, version, hash, canonical) VALUES "
                               "('order-payment', 1, 'h', '{}'), ('trip', 1, 'h', '{}')");
    const std::string completed_31 = AddSaga(url, "order-payment", "completed", 32, 31);
    const std::string compensated_40 = AddSaga(url, "order-payment", "compensated", 40, 40);
    const std::string trip_35 = AddSaga(url, "trip", "completed", 35, 35);
    const std::string failed_40 = AddSaga(url, "order-payment", "failed", 40, 40);
    const std::string completed_29 = AddSaga(url, "order-payment", "completed", 29, 29);
    const std::string running_60 = AddSaga(url, "order-payment", "running", 60, 60);
    const std::string long_lived = AddSaga(url, "order-payment", "completed", 60, 1);  // created long ago, ended now
    sagaflow::testing::Execute(url,
                               "INSERT INTO saga_event (saga_id, kind, at) VALUES (NULL, 'ignored', now() - interval "
                               "'31 days'), (NULL, 'ignored', now() - interval '1 day')");
    const auto all_rows = [&] {
        return Count(url,
                     "SELECT (SELECT count(*) FROM saga_instance) + (SELECT count(*) FROM saga_step) + "
                     "(SELECT count(*) FROM saga_timeline)");
    };
    REQUIRE(all_rows() == 7 * 6 + 2);

    const CliRun refused = RunCli("prune --older-than-days 2 --db '" + url + "'");
    CHECK(refused.code == 1);
    CHECK(refused.err.find("--older-than-days: a horizon of 48 h is refused: it must be at least 72 h") !=
          std::string::npos);
    // The engine's own retention is refused the same way, naming its flag, before it connects.
    const CliRun run_refused = RunCli("run --prune-after-days 2 --brokers 127.0.0.1:9 --db '" + url + "'");
    CHECK(run_refused.code == 1);
    CHECK(run_refused.err.find("--prune-after-days: a horizon of 48 h is refused") != std::string::npos);

    const CliRun dry = RunCli("prune --dry-run --db '" + url + "'");
    CHECK(dry.code == 0);
    CHECK(dry.out.find("would delete 3 sagas (6 step rows, 9 timeline entries) that ended over 30 days ago") !=
          std::string::npos);
    CHECK(all_rows() == 7 * 6 + 2);  // a dry run deletes nothing

    const CliRun run = RunCli("prune --db '" + url + "'");
    CHECK(run.code == 0);
    CHECK(run.out.find("deleted 3 sagas (6 step rows, 9 timeline entries) that ended over 30 days ago") !=
          std::string::npos);
    CHECK(run.out.find("and 1 timeline entries of no saga") != std::string::npos);
    CHECK(run.err.find("prune: 1 sagas deleted so far") != std::string::npos);  // progress, per batch
    for (const auto& id : {completed_31, compensated_40, trip_35}) CHECK(SagaRowCount(url, id) == 0);
    for (const auto& id : {failed_40, completed_29, running_60, long_lived}) CHECK(SagaRowCount(url, id) == 6);
    CHECK(Count(url, "SELECT count(*) FROM saga_event WHERE saga_id IS NULL") == 1);

    // Failed sagas only when asked; in batches of one through the library, with progress each time.
    sagaflow::PruneOptions options;
    options.include_failed = true;
    options.batch_size = 1;
    int calls = 0;
    pqxx::connection conn{url};
    const auto report = sagaflow::PruneHistory(conn, options, [&](const sagaflow::PruneReport&) { ++calls; });
    CHECK(report.sagas == 1);
    CHECK(report.steps == 2);
    CHECK(report.events == 3);
    CHECK(calls == 1);
    CHECK(SagaRowCount(url, failed_40) == 0);
    CHECK(all_rows() == 3 * 6 + 1);
}

TEST_CASE("a configuration file gives the maintenance commands their database; a bad file or flag stops run first") {
    ScratchDatabase db;
    const std::string dir = "/tmp/sagaflow-cli-itest-config-" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/good.yaml") << "db:\n  url: '" << db.Url() << "'\n";
    std::ofstream(dir + "/bad.yaml") << "db:\n  url: '" << db.Url() << "'\n  pool_sise: 3\nhttp:\n  listen: nowhere\n";
    const auto tables = [&] {
        return Count(db.Url(), "SELECT count(*) FROM pg_tables WHERE tablename IN ('saga_instance', 'outbox')");
    };

    // Refused with every problem at its position, before anything connects: still no tables.
    const CliRun bad = RunCli("run --config " + dir + "/bad.yaml --brokers 127.0.0.1:9");
    CHECK(bad.code == 1);
    CHECK(bad.err.find(dir + "/bad.yaml:3:3: error: db.pool_sise: unknown key 'pool_sise' (did you mean "
                             "'pool_size'?)") != std::string::npos);
    CHECK(bad.err.find(dir + "/bad.yaml:5:11: error: http.listen: expected ADDRESS:PORT") != std::string::npos);
    CHECK(bad.err.find("2 configuration error(s)") != std::string::npos);
    const CliRun bad_flag = RunCli("run --config " + dir + "/good.yaml --brokers 127.0.0.1:9 --http 0.0.0.0:http");
    CHECK(bad_flag.code == 2);
    CHECK(bad_flag.err.find("--http: expected ADDRESS:PORT") != std::string::npos);
    CHECK(tables() == 0);

    const CliRun migrate = RunCli("migrate --config " + dir + "/good.yaml");
    CHECK(migrate.code == 0);
    CHECK(migrate.out.find("migration(s) applied") != std::string::npos);
    CHECK(tables() == 2);
    const CliRun sweep = RunCli("sweep --config " + dir + "/good.yaml");
    CHECK(sweep.code == 0);
    // An environment variable overrides the file's key: a database that does not exist fails.
    ::setenv("SAGAFLOW_DB_URL", sagaflow::testing::WithDatabase(db.Url(), "no_such_db").c_str(), 1);
    const CliRun overridden = RunCli("sweep --config " + dir + "/good.yaml");
    ::unsetenv("SAGAFLOW_DB_URL");
    CHECK(overridden.code == 1);
    CHECK(overridden.err.find("no_such_db") != std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("upgrade-check --db counts OLD's unfinished instances by step and names the handlers they need") {
    ScratchDatabase db;
    REQUIRE(RunCli("migrate --db '" + db.Url() + "'").code == 0);
    const std::string source = std::getenv("SAGAFLOW_SOURCE_DIR");
    const std::string old_file = source + "/sagas/order-payment.yaml";
    const std::string new_file = source + "/tests/corpus/upgrade/order-payment-v2-unsafe.yaml";
    // OLD's hash, as the report names it.
    const CliRun plain = RunCli("upgrade-check " + old_file + " " + new_file + " --json");
    CHECK(plain.code == 1);
    const std::string old_hash = nlohmann::json::parse(plain.out)["old"]["hash"];
    {
        pqxx::connection conn{db.Url()};
        pqxx::work tx{conn};
        // Two running at charge-payment, one compensating from it, one parked at approve-order, one
        // finished, one at charge-payment on another version (not OLD's).
        tx.exec_params(
            "INSERT INTO saga_instance (saga_id, saga_type, definition_version, definition_hash, status, current_step, "
            "input) SELECT gen_random_uuid(), 'order-payment', 1, h, s, c, '{}' FROM (VALUES ($1, 'running', 1), "
            "($1, 'running', 1), ($1, 'compensating', 1), ($1, 'failed', 2), ($1, 'completed', 2), "
            "('other', 'running', 1)) v(h, s, c)",
            old_hash);
        tx.commit();
    }
    const CliRun run = RunCli("upgrade-check " + old_file + " " + new_file + " --db '" + db.Url() + "' --json");
    INFO(run.err);
    CHECK(run.code == 1);  // the pair is unsafe
    const auto counted = nlohmann::json::parse(run.out)["inFlight"];
    CHECK(counted["sagas"] == 4);
    const nlohmann::json expected = nlohmann::json::array(
        {{{"step", "charge-payment"},
          {"status", "compensating"},
          {"sagas", 1},
          {"handlers", {"payment: RefundPayment.v1", "order: CancelOrder.v1"}}},
         {{"step", "charge-payment"},
          {"status", "running"},
          {"sagas", 2},
          {"handlers", {"payment: ChargePayment.v1", "payment: RefundPayment.v1", "order: CancelOrder.v1"}}},
         {{"step", "approve-order"}, {"status", "failed"}, {"sagas", 1}, {"handlers", {"order: ApproveOrder.v1"}}}});
    CHECK(counted["byStep"] == expected);
    const CliRun text = RunCli("upgrade-check " + old_file + " " + new_file + " --db '" + db.Url() + "'");
    CHECK(text.out.find("instances of v1 (hash " + old_hash.substr(0, 12) + ") not finished: 4") != std::string::npos);
    CHECK(text.out.find("2 running at 'charge-payment'; may still need payment: ChargePayment.v1, payment: "
                        "RefundPayment.v1, order: CancelOrder.v1") != std::string::npos);
}
