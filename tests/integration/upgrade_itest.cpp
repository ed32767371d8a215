// An upgrade with sagas in flight: the release before step graphs (its `sagaflow run`, built by
// tests/upgrade/build_previous) starts order-payment sagas and dies mid-way; the current engine
// takes over on the same database, applies its migrations and finishes them unchanged.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdlib>
#include <pqxx/pqxx>
#include <thread>

#include "tests/support/example_rig.hpp"
#include "tests/support/http_client.hpp"

using namespace sagaflow;
using testing::Count;
using testing::ExampleRig;
using testing::WaitFor;

TEST_CASE("sagas started by the previous release finish unchanged on the current one") {
    const char* previous = std::getenv("SAGAFLOW_PREVIOUS_CLI");
    REQUIRE_MESSAGE(previous != nullptr, "SAGAFLOW_PREVIOUS_CLI is not set: run this test through ctest");
    ExampleRig rig;
    // Two slow charges keep sagas in flight when the old engine dies (slower ones, queued on a
    // partition, would make this a test of step timeouts).
    const std::vector<std::string> slow{"--slow-order=up-22:1000", "--slow-order=up-23:1000"};
    auto order = rig.SpawnOrderService();
    auto payment = rig.SpawnPaymentService({}, slow);

    auto old_engine = rig.SpawnEngine("old", {}, {"--http", "127.0.0.1:0"}, previous);
    const int port = testing::WaitForHttpPort(rig.LogDir() + "/old.log", std::chrono::seconds(60));
    REQUIRE(port > 0);
    std::map<std::string, std::string> ids;  // order id -> saga id
    for (int n = 0; n < 24; ++n) {
        const std::string order_id = "up-" + std::to_string(n);
        const auto started = testing::HttpRequest(port,
                                                  "POST",
                                                  "/v1/sagas/order-payment",
                                                  {{"Idempotency-Key", order_id}, {"Content-Type", "application/json"}},
                                                  ExampleRig::Input(order_id, n % 4 == 1 ? "900.00" : "120.00").dump());
        REQUIRE_MESSAGE(started.status == 201, started.body);
        ids[order_id] = started.Json()["sagaId"];
    }
    // Every saga is part of the way on the old engine (its first step answered), the slow ones still
    // in flight: then it dies.
    REQUIRE(WaitFor(
        [&] {
            return Count(rig.DbUrl(),
                         "SELECT count(*) FROM saga_step WHERE step_name = 'create-order' AND phase = 'action' AND "
                         "status = 'succeeded'") == 24;
        },
        std::chrono::seconds(60)));
    old_engine->KillAndWait(SIGKILL);
    const long long open_at_upgrade = rig.Open();
    MESSAGE(open_at_upgrade << " of 24 sagas open when the old engine died");
    CHECK(open_at_upgrade > 0);
    // ... some of them part of the way: steps the old engine saw answered.
    const long long answered = Count(rig.DbUrl(), "SELECT count(*) FROM saga_step WHERE status = 'succeeded'");
    MESSAGE(answered << " step phases answered on the old engine");
    CHECK(answered > 0);
    CHECK(Count(rig.DbUrl(), "SELECT count(*) FROM sagaflow_migration WHERE version = 19") == 0);
    const long long hashes_before = Count(rig.DbUrl(), "SELECT count(DISTINCT definition_hash) FROM saga_instance");

    // The current engine: migrates, resumes, finishes.
    auto new_engine = rig.SpawnEngine("new");
    REQUIRE(rig.WaitQuiet(std::chrono::seconds(120)));
    CHECK(Count(rig.DbUrl(), "SELECT count(*) FROM sagaflow_migration WHERE version = 19") == 1);
    CHECK(Count(rig.DbUrl(), "SELECT count(DISTINCT definition_hash) FROM saga_instance") == hashes_before);
    for (const auto& [order_id, saga_id] : ids) {
        CAPTURE(order_id);
        const int n = std::stoi(order_id.substr(3));
        const std::string expected = n % 4 == 1 ? "compensated" : "completed";
        pqxx::connection c(rig.DbUrl());
        pqxx::work tx(c);
        const auto row = tx.exec_params1(
            "SELECT i.status || ' ' || coalesce(i.parked_reason, '') || ' [' || (SELECT string_agg(s.step_name || ':' "
            "|| "
            "s.phase || '=' || s.status || '#' || s.attempt, ', ' ORDER BY s.dispatched_at) FROM saga_step s WHERE "
            "s.saga_id = i.saga_id) || '] ' || (SELECT string_agg(e.kind || coalesce(' ' || e.step_name, ''), ', ') "
            "FROM saga_timeline e WHERE e.saga_id = i.saga_id), i.status FROM saga_instance i WHERE i.saga_id = "
            "$1::uuid",
            saga_id);
        CHECK_MESSAGE(row[1].as<std::string>() == expected, row[0].as<std::string>());
    }
    const auto audit = rig.Audit();
    INFO(audit.Summary());
    CHECK(audit.Ok());
    new_engine->KillAndWait(SIGTERM);
    payment->KillAndWait(SIGTERM);
    order->KillAndWait(SIGTERM);
}
