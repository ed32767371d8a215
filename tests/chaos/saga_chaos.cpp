// The seeded chaos run: thousands of order-payment sagas through the engine, a separate relay and
// both example services, on a PostgreSQL and a broker of the test's own, while a seeded schedule
// SIGKILLs the engine, the relay and the participants, re-delivers published messages, stops the
// broker, restarts PostgreSQL, and the payment provider is slower than the step timeout now and
// then. Then it waits for quiescence and runs the audit. Replay a run exactly with its seed:
//   SAGAFLOW_CHAOS_SEED=<seed> SAGAFLOW_CHAOS_SAGAS=<n> ctest -R saga_chaos
#include <doctest/doctest.h>
#include <signal.h>

#include <iostream>
#include <map>
#include <pqxx/pqxx>
#include <random>
#include <thread>

#include "outbox/detail/rdkafka.hpp"
#include "tests/support/example_rig.hpp"
#include "tests/support/own_services.hpp"

using namespace sagaflow;
using testing::ExampleRig;

namespace {

int EnvInt(const char* name, int fallback) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' ? std::stoi(value) : fallback;
}

// Re-publishes the last `count` published rows of an outbox, as a relay that crashed between the
// broker's acknowledgement and its commit would: same event id, same bytes.
int Redeliver(const std::string& db_url, const std::string& brokers, const std::string& table, int count) {
    using namespace outbox::detail;
    auto producer = MakeClient(RD_KAFKA_PRODUCER,
                               MakeConf({{"bootstrap.servers", brokers},
                                         {"enable.idempotence", "true"},
                                         {"log_level", "0"},
                                         {"message.timeout.ms", "10000"}}));
    pqxx::connection conn{db_url};
    pqxx::read_transaction tx{conn};
    int produced = 0;
    for (const auto& row : tx.exec("SELECT topic, message_key, payload::text FROM " + table +
                                   " WHERE published_at IS NOT NULL ORDER BY id DESC LIMIT " + std::to_string(count))) {
        if (Produce(producer.get(),
                    row[0].as<std::string>(),
                    row[1].as<std::string>(),
                    row[2].as<std::string>(),
                    nullptr,
                    nullptr) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            ++produced;
        }
    }
    rd_kafka_flush(producer.get(), 10'000);
    return produced;
}

}  // namespace

TEST_CASE("seeded chaos over the order-payment example: every guarantee holds afterwards") {
    const auto seed = static_cast<std::uint32_t>(
        EnvInt("SAGAFLOW_CHAOS_SEED", static_cast<int>(std::random_device{}() & 0x7fffffff)));
    const int sagas = EnvInt("SAGAFLOW_CHAOS_SAGAS", 5000);
    std::cout << "chaos: seed " << seed << ", " << sagas << " sagas (replay: SAGAFLOW_CHAOS_SEED=" << seed
              << " SAGAFLOW_CHAOS_SAGAS=" << sagas << ")" << std::endl;
    std::mt19937 rng{seed};
    testing::OwnPostgres pg;
    testing::OwnBroker broker;
    ExampleRig rig{broker.Brokers(), pg.Url()};

    auto engine = rig.SpawnEngine("engine-1", {}, {"--no-relay"});
    auto relay = rig.SpawnRelay();
    const std::vector<std::string> slow{"--slow-every", "997", "--slow-ms", "6000"};
    auto order = rig.SpawnOrderService();
    auto payment = rig.SpawnPaymentService({}, slow);
    auto front = rig.FrontEnd();

    std::map<std::string, int> faults;
    int started = 0;
    int start_retries = 0;
    const auto start_some = [&](int count) {
        for (int i = 0; i < count && started < sagas; ++i) {
            const std::string id = "chaos-" + std::to_string(seed) + "-" + std::to_string(started);
            const std::string amount = started % 7 == 6 ? "900.00" : "25.00";  // one in 7 declined
            try {
                // The same key on every retry: a start that failed in doubt is never doubled.
                if (front->StartSaga("order-payment", ExampleRig::Input(id, amount), id).Accepted()) ++started;
            } catch (const std::exception&) {
                ++start_retries;  // PostgreSQL is restarting: try again with the same key
                return;
            }
        }
    };
    const auto respawn_dead = [&] {
        if (!engine->Running()) engine = rig.SpawnEngine("engine-1", {}, {"--no-relay"});
        if (!relay->Running()) relay = rig.SpawnRelay();
        if (!order->Running()) order = rig.SpawnOrderService();
        if (!payment->Running()) payment = rig.SpawnPaymentService({}, slow);
    };

    // Load and faults: about 60 sagas/s, a fault every 1.5-4 s.
    auto next_fault = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    auto last_report = std::chrono::steady_clock::now();
    while (started < sagas) {
        start_some(6);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        respawn_dead();
        if (std::chrono::steady_clock::now() >= next_fault) {
            switch (rng() % 7) {
                case 0:
                    engine->KillAndWait(SIGKILL);
                    ++faults["kill engine"];
                    break;
                case 1:
                    relay->KillAndWait(SIGKILL);
                    ++faults["kill relay"];
                    break;
                case 2:
                    order->KillAndWait(SIGKILL);
                    ++faults["kill order service"];
                    break;
                case 3:
                    payment->KillAndWait(SIGKILL);
                    ++faults["kill payment service"];
                    break;
                case 4: {
                    static const std::vector<std::string> tables{"outbox", "orders.outbox", "payments.outbox"};
                    try {
                        faults["messages redelivered"] +=
                            Redeliver(rig.DbUrl(), rig.Brokers(), tables[rng() % tables.size()], 50);
                    } catch (const std::exception&) {
                    }
                    ++faults["redelivery bursts"];
                    break;
                }
                case 5:
                    broker.Run("halt " + broker.State() + " >/dev/null");
                    std::this_thread::sleep_for(std::chrono::milliseconds(2000 + rng() % 2000));
                    broker.Run("resume " + broker.State() + " >/dev/null");
                    ++faults["broker stops"];
                    break;
                case 6:
                    pg.Restart();
                    ++faults["postgresql restarts"];
                    break;
            }
            next_fault = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500 + rng() % 2500);
        }
        if (std::chrono::steady_clock::now() - last_report > std::chrono::seconds(10)) {
            last_report = std::chrono::steady_clock::now();
            int injected = 0;
            for (const auto& [kind, count] : faults) injected += kind == "messages redelivered" ? 0 : count;
            std::cout << "chaos: " << started << "/" << sagas << " started, " << injected << " faults so far"
                      << std::endl;
        }
    }
    std::cout << "chaos: all " << sagas << " started; waiting for quiescence" << std::endl;
    const bool quiet = [&] {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
        while (std::chrono::steady_clock::now() < deadline) {
            respawn_dead();
            try {
                if (rig.WaitQuiet(std::chrono::seconds(5))) return true;
                std::cout << "chaos: " << rig.Open() << " sagas still open" << std::endl;
            } catch (const std::exception&) {
            }
        }
        return false;
    }();
    std::this_thread::sleep_for(std::chrono::seconds(2));  // late duplicates
    const auto report = rig.Audit();
    std::cout << "chaos: seed " << seed << "; faults:";
    for (const auto& [kind, count] : faults) std::cout << " " << kind << " " << count << ";";
    std::cout << " start retries " << start_retries << "\n" << report.Summary() << std::flush;
    {
        pqxx::connection conn{rig.DbUrl()};
        pqxx::read_transaction tx{conn};
        for (const auto& row : tx.exec("SELECT status, count(*) FROM saga_instance GROUP BY 1 ORDER BY 1")) {
            std::cout << "chaos: " << row[0].as<std::string>() << " " << row[1].as<long long>() << "\n";
        }
    }
    CHECK(quiet);
    CHECK(report.sagas == sagas);
    CHECK(report.Ok());
    engine->KillAndWait(SIGTERM);
    relay->KillAndWait(SIGTERM);
    order->KillAndWait(SIGTERM);
    payment->KillAndWait(SIGTERM);
}
