// The demo's scenario against the real broker: `sagaflow demo --kafka` must exit 0 with the
// invariant line, and the tables must show it independently, including the double protection of
// rule X3 (one order started under two idempotency keys: one payment row, both sagas completed with
// the same payment).
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <pqxx/pqxx>
#include <sstream>

#include "engine/detail/child_process.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow;

TEST_CASE("the order-payment demo against the real broker keeps the money invariant") {
    testing::ScratchDatabase db;
    const std::string source = std::getenv("SAGAFLOW_SOURCE_DIR");
    const char* services = std::getenv("SAGAFLOW_SERVICES_BIN");
    REQUIRE_MESSAGE(services != nullptr, "SAGAFLOW_SERVICES_BIN is not set: run this test through ctest");
    const std::string log = "/tmp/" + testing::UniqueName("demo") + ".log";
    int status = 0;
    {
        detail::ChildProcess demo{testing::SagaflowCli(),
                                  {"demo",
                                   "--db",
                                   db.Url(),
                                   "--kafka",
                                   testing::KafkaBrokers(),
                                   "--saga",
                                   source + "/sagas/order-payment.yaml",
                                   "--services-dir",
                                   services,
                                   "--sagas",
                                   "20"},
                                  log};
        const int raw = demo.Wait();
        status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    }
    std::ifstream in(log);
    std::stringstream output;
    output << in.rdbuf();
    std::remove(log.c_str());
    INFO(output.str());
    CHECK(status == 0);
    CHECK(output.str().find("money invariant holds") != std::string::npos);

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
    // The slow provider's saga: outcome unknown, compensated, its late charge refunded once.
    CHECK(tx.exec1("SELECT count(*) FROM payments.refund")[0].as<long long>() == 1);
    // Every declined order was cancelled and never charged.
    CHECK(tx.exec1("SELECT count(*) FROM orders.orders WHERE amount > 500 AND status <> 'cancelled'")[0]
              .as<long long>() == 0);
}
