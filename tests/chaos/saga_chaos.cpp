// The seeded chaos run: thousands of order-payment sagas through the engine, a separate relay and
// both example services, on a PostgreSQL of the test's own, while a seeded schedule SIGKILLs the
// engine, the relay and the participants, rewinds consumer offsets, re-delivers published
// messages, restarts PostgreSQL, and the payment provider is slower than the step timeout now and
// then. On a real broker of its own the broker is also stopped and started; in the mock-cluster
// variant produce requests fail instead. Then it waits for quiescence and runs the audit.
// Replay a run's schedule with its seed:
//   SAGAFLOW_CHAOS_SEED=<seed> SAGAFLOW_CHAOS_SAGAS=<n> ctest -R saga_chaos
#include <doctest/doctest.h>
#include <signal.h>

#include <charconv>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <pqxx/pqxx>
#include <random>
#include <string_view>
#include <thread>

#include "outbox/detail/rdkafka.hpp"

// rdkafka_mock.h needs rdkafka.h first.
#include <librdkafka/rdkafka_mock.h>

#include "outbox/relay.hpp"
#include "tests/support/example_rig.hpp"
#include "tests/support/own_services.hpp"

using namespace sagaflow;
using testing::ExampleRig;
using testing::Redeliver;

namespace {

// A failed run leaves the evidence in the output (the rig's folder is removed with it): what each
// outbox still holds, who holds the relay locks, and the tail of every process's log.
void DumpForDiagnosis(const testing::ExampleRig& rig, const std::map<std::string, pid_t>& processes) {
    try {
        pqxx::connection conn{rig.DbUrl()};
        pqxx::nontransaction tx{conn};
        for (const auto& schema :
             tx.exec("SELECT table_schema FROM information_schema.tables WHERE table_name = 'outbox'")) {
            const std::string name = conn.quote_name(schema[0].as<std::string>());
            const auto row = tx.exec1(
                "SELECT count(*), min(id), max(id), max(attempts), count(next_attempt_at), "
                "coalesce(string_agg(DISTINCT last_error, '; '), ''), "
                "coalesce(extract(epoch FROM now() - min(created_at))::int, 0) FROM " +
                name + ".outbox WHERE published_at IS NULL");
            std::cout << "diagnosis: outbox " << name << ": " << row[0].as<long long>() << " unpublished (ids "
                      << row[1].c_str() << ".." << row[2].c_str() << ", max attempts " << row[3].c_str() << ", "
                      << row[4].as<long long>() << " backing off, oldest " << row[6].as<long long>()
                      << " s, errors: " << row[5].c_str() << ")" << std::endl;
            for (const auto& r : tx.exec("SELECT id, message_key, attempts, next_attempt_at::text, "
                                         "extract(epoch FROM now() - created_at)::int, "
                                         "coalesce(last_error, '') FROM " +
                                         name + ".outbox WHERE published_at IS NULL ORDER BY id LIMIT 20")) {
                std::cout << "diagnosis:   unpublished " << r[0].c_str() << " key " << r[1].c_str() << " attempts "
                          << r[2].c_str() << " next " << r[3].c_str() << " age " << r[4].c_str() << " s "
                          << r[5].c_str() << std::endl;
            }
        }
        // What a relay's full claim would take now: the relay's own statement (outbox::
        // RelayClaimStatement; it writes nothing), in a transaction rolled back at once.
        try {
            pqxx::connection probe{rig.DbUrl()};
            for (const auto& schema : pqxx::nontransaction{probe}.exec(
                     "SELECT table_schema FROM information_schema.tables WHERE table_name = 'outbox'")) {
                pqxx::work work{probe};
                work.exec("SET LOCAL lock_timeout = '2s'");
                work.exec("SET LOCAL search_path = " + probe.quote_name(schema[0].as<std::string>()));
                std::string ids;
                const auto claimed = work.exec_params(outbox::RelayClaimStatement(false), 200, 0);
                for (const auto& row : claimed) ids += (ids.empty() ? "" : ",") + row[0].as<std::string>();
                std::cout << "diagnosis: " << schema[0].c_str() << ".outbox: a relay's claim would take "
                          << claimed.size() << " rows now (" << ids << ")" << std::endl;
                work.abort();
            }
        } catch (const std::exception& e) {
            std::cout << "diagnosis: claim probe failed: " << e.what() << std::endl;
        }
        for (const auto& row :
             tx.exec("SELECT pid, state, coalesce(extract(epoch FROM now() - xact_start)::int, -1), "
                     "coalesce(backend_xid::text, ''), coalesce(application_name, ''), left(query, 100) "
                     "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")) {
            std::cout << "diagnosis: session " << row[0].c_str() << " " << row[1].c_str() << " xact " << row[2].c_str()
                      << " s xid " << row[3].c_str() << " " << row[4].c_str() << ": " << row[5].c_str() << std::endl;
        }
        for (const auto& row : tx.exec("SELECT l.pid, l.objid, a.state, left(a.query, 80) FROM pg_locks l "
                                       "LEFT JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory'")) {
            std::cout << "diagnosis: advisory lock " << row[1].c_str() << " held by pid " << row[0].c_str() << " ("
                      << row[2].c_str() << ": " << row[3].c_str() << ")" << std::endl;
        }
    } catch (const std::exception& e) {
        std::cout << "diagnosis: database not readable: " << e.what() << std::endl;
    }
    // Where each process's threads are (a relay that holds its lock but does not claim).
    for (const auto& [name, pid] : processes) {
        std::cout << "diagnosis: threads of " << name << " (pid " << pid << "):" << std::endl;
        const std::string command = "gdb -p " + std::to_string(pid) +
                                    " -batch -ex 'thread apply all bt 25' 2>/dev/null | grep -E '^(Thread|#)' | "
                                    "grep -v 'in ?? ()' | head -400";
        if (std::system(command.c_str()) != 0) std::cout << "diagnosis: (gdb not available)" << std::endl;
    }
    for (const auto& entry : std::filesystem::directory_iterator(rig.LogDir())) {
        if (entry.path().extension() != ".log") continue;
        std::ifstream in(entry.path());
        // The progress lines every 5 s would bury the rest: the last 40 other lines, then the last 3.
        std::deque<std::string> events;
        std::deque<std::string> tail;
        for (std::string line; std::getline(in, line);) {
            const bool progress = line.find(": applied ") != std::string::npos ||
                                  line.rfind("engine: started ", 0) == 0 || line.rfind("relay: published ", 0) == 0;
            auto& keep = progress ? tail : events;
            keep.push_back(line);
            if (keep.size() > (progress ? 3U : 40U)) keep.pop_front();
        }
        std::cout << "diagnosis: last lines of " << entry.path().filename().string() << ":" << std::endl;
        for (const auto& line : events) std::cout << "  " << line << std::endl;
        for (const auto& line : tail) std::cout << "  " << line << std::endl;
    }
}

// A whole number from the environment in 0..max, or `fallback` when unset; anything else stops the
// test naming the variable and the range (std::stoi said only "stoi").
long long EnvNumber(const char* name, long long fallback, long long max) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') return fallback;
    const std::string_view text{value};
    long long number = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (ec != std::errc() || end != text.data() + text.size() || number < 0 || number > max) {
        throw std::invalid_argument(std::string(name) + "='" + value + "' is not a whole number from 0 to " +
                                    std::to_string(max));
    }
    return number;
}

// Moves the committed offsets of `group` on `topic` back by `back` per partition: its next
// consumer re-reads those records (the group must have no live member: the caller killed it).
// Returns how many records will be read again, or -1 if the broker refused.
int Rewind(const std::string& brokers, const std::string& group, const std::string& topic, int back) {
    using namespace outbox::detail;
    auto consumer = MakeClient(RD_KAFKA_CONSUMER,
                               MakeConf({{"bootstrap.servers", brokers},
                                         {"group.id", group},
                                         {"enable.auto.commit", "false"},
                                         {"log_level", "0"}}));
    TopicPartitionListPtr list{rd_kafka_topic_partition_list_new(4)};
    for (int p = 0; p < 4; ++p) rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p);
    if (rd_kafka_committed(consumer.get(), list.get(), 10'000) != RD_KAFKA_RESP_ERR_NO_ERROR) return -1;
    int rewound = 0;
    for (int i = 0; i < list->cnt; ++i) {
        auto& tp = list->elems[i];
        if (tp.offset <= 0) continue;
        const auto to = std::max<std::int64_t>(0, tp.offset - back);
        rewound += static_cast<int>(tp.offset - to);
        tp.offset = to;
    }
    const auto err = rd_kafka_commit(consumer.get(), list.get(), 0);
    rd_kafka_consumer_close(consumer.get());
    return err == RD_KAFKA_RESP_ERR_NO_ERROR ? rewound : -1;
}

// Where the messages go: a broker of the test's own (stopped and started as a fault), or
// librdkafka's mock cluster in this process (produce requests fail as a fault).
class ChaosKafka {
  public:
    virtual ~ChaosKafka() = default;
    virtual std::string Brokers() const = 0;
    virtual void Prepare(const ExampleRig& rig) = 0;
    // Injects this variant's Kafka fault; returns its name for the counts.
    virtual std::string Fault(std::mt19937& rng) = 0;
};

class RealBroker : public ChaosKafka {
  public:
    std::string Brokers() const override { return broker_.Brokers(); }
    void Prepare(const ExampleRig&) override {}
    std::string Fault(std::mt19937& rng) override {
        broker_.Run("halt " + broker_.State() + " >/dev/null");
        std::this_thread::sleep_for(std::chrono::milliseconds(2000 + rng() % 2000));
        broker_.Run("resume " + broker_.State() + " >/dev/null");
        return "broker stops";
    }

  private:
    testing::OwnBroker broker_;
};

class MockCluster : public ChaosKafka {
  public:
    MockCluster()
        : host_(outbox::detail::MakeClient(RD_KAFKA_PRODUCER, outbox::detail::MakeConf({{"log_level", "0"}}))),
          cluster_(rd_kafka_mock_cluster_new(host_.get(), 3)) {
        REQUIRE(cluster_ != nullptr);
        brokers_ = rd_kafka_mock_cluster_bootstraps(cluster_);
    }
    ~MockCluster() override { rd_kafka_mock_cluster_destroy(cluster_); }
    std::string Brokers() const override { return brokers_; }
    void Prepare(const ExampleRig& rig) override {
        for (const auto& topic : {rig.OrderName() + ".commands", rig.PaymentName() + ".commands", rig.Replies()}) {
            REQUIRE(rd_kafka_mock_topic_create(cluster_, topic.c_str(), 4, 3) == RD_KAFKA_RESP_ERR_NO_ERROR);
        }
    }
    std::string Fault(std::mt19937& rng) override {
        // The next produce requests, whoever sends them, fail with retriable errors.
        constexpr std::int16_t kProduceApiKey = 0;
        rd_kafka_mock_push_request_errors(cluster_,
                                          kProduceApiKey,
                                          6,
                                          RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                                          RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
                                          RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                                          RD_KAFKA_RESP_ERR__TRANSPORT,
                                          RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
                                          RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION);
        static_cast<void>(rng);
        return "produce error bursts";
    }

  private:
    outbox::detail::ClientPtr host_;
    rd_kafka_mock_cluster_t* cluster_;
    std::string brokers_;
};

void RunChaos(ChaosKafka& kafka, int default_sagas);

}  // namespace

TEST_CASE("seeded chaos on a real broker: every guarantee holds afterwards") {
    RealBroker kafka;
    RunChaos(kafka, 5000);
}

TEST_CASE("seeded chaos on the mock cluster with injected produce errors: every guarantee holds afterwards") {
    MockCluster kafka;
    RunChaos(kafka, 1000);
}

namespace {

void RunChaos(ChaosKafka& kafka, int default_sagas) {
    const auto seed = static_cast<std::uint32_t>(
        EnvNumber("SAGAFLOW_CHAOS_SEED", std::random_device{}(), std::numeric_limits<std::uint32_t>::max()));
    const auto sagas = static_cast<int>(EnvNumber("SAGAFLOW_CHAOS_SAGAS", default_sagas, 1'000'000));
    std::cout << "chaos: seed " << seed << ", " << sagas << " sagas (replay: SAGAFLOW_CHAOS_SEED=" << seed
              << " SAGAFLOW_CHAOS_SAGAS=" << sagas << ")" << std::endl;
    std::mt19937 rng{seed};
    testing::OwnPostgres pg;
    const bool mock = dynamic_cast<MockCluster*>(&kafka) != nullptr;
    ExampleRig rig{kafka.Brokers(), pg.Url(), !mock};
    kafka.Prepare(rig);

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
            switch (rng() % 8) {
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
                case 5: {
                    // Rewind a consumer group: kill its consumer, wait until the group has no live
                    // member (session timeout 6 s), move its offsets back, restart it.
                    const int which = static_cast<int>(rng() % 2);
                    auto& victim = which == 0 ? order : payment;
                    const std::string name = which == 0 ? rig.OrderName() : rig.PaymentName();
                    victim->KillAndWait(SIGKILL);
                    std::this_thread::sleep_for(std::chrono::seconds(7));
                    const int rewound = Rewind(rig.Brokers(), "sagaflow-participant-" + name, name + ".commands", 40);
                    if (rewound >= 0) {
                        ++faults["offset rewinds"];
                        faults["messages rewound"] += rewound;
                    } else {
                        ++faults["offset rewinds refused"];
                    }
                    break;
                }
                case 6:
                    ++faults[kafka.Fault(rng)];
                    break;
                case 7:
                    pg.Restart();
                    ++faults["postgresql restarts"];
                    break;
            }
            next_fault = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500 + rng() % 2500);
        }
        if (std::chrono::steady_clock::now() - last_report > std::chrono::seconds(10)) {
            last_report = std::chrono::steady_clock::now();
            int injected = 0;
            for (const auto& [kind, count] : faults) injected += kind.rfind("messages", 0) == 0 ? 0 : count;
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
    if (!quiet || !report.Ok()) {
        DumpForDiagnosis(rig,
                         {{"engine", engine->Pid()},
                          {"relay", relay->Pid()},
                          {"order service", order->Pid()},
                          {"payment service", payment->Pid()}});
    }
    CHECK(quiet);
    CHECK(report.sagas == sagas);
    CHECK(report.Ok());
    engine->KillAndWait(SIGTERM);
    relay->KillAndWait(SIGTERM);
    order->KillAndWait(SIGTERM);
    payment->KillAndWait(SIGTERM);
}

}  // namespace
