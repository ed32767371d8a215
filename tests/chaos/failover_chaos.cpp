// Liveness under routine faults, as a user runs sagaflow: two engines (`sagaflow run --http`), two
// replicas of each example service in one consumer group each, the real broker and PostgreSQL, and
// sagas started over HTTP at a steady rate by a client that sends each order to either engine and
// retries with the same Idempotency-Key on any error. Faults: both replicas of each service started
// at the same moment on an empty database; SIGKILL of one engine and of one replica of each service,
// each restarted 5 s later; the broker halted for 10 s; a PostgreSQL crash-restart.
//
// Every tenth order is over the payment limit and is declined by design. A business operator expects
// the faults to slow the others down, never to cancel them: the test asserts no saga compensated
// beyond the declined ones, every saga ended within a bound after the last fault, each outbox's
// publication delay below a bound, one saga per key, no order charged twice, and the audit.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <pqxx/pqxx>
#include <thread>

#include "tests/support/example_rig.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/own_services.hpp"

using namespace sagaflow;
using testing::ExampleRig;

namespace {

using Clock = std::chrono::steady_clock;

int FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    socklen_t length = sizeof(address);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    ::close(fd);
    return ntohs(address.sin_port);
}

double EpochSeconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The starting client: order n goes to engine n % 2 first, then alternates between the two until
// one answers 200/201 (the same key every time: a start that failed in doubt is never doubled).
class Client {
  public:
    Client(std::vector<int> ports) : ports_(std::move(ports)) {}

    // Starts order `n`; true once an engine accepted it. Gives up after `patience`.
    bool Start(int n, std::chrono::seconds patience) {
        const std::string id = "fo-" + std::to_string(n);
        const std::string amount = n % 10 == 9 ? "900.00" : "25.00";  // one in ten declined
        const nlohmann::json body{{"orderId", id}, {"customerId", 7}, {"amount", amount}};
        const auto give_up = Clock::now() + patience;
        for (int attempt = 0; Clock::now() < give_up; ++attempt) {
            const int port = ports_[static_cast<std::size_t>(n + attempt) % ports_.size()];
            try {
                const auto result =
                    testing::HttpRequest(port,
                                         "POST",
                                         "/v1/sagas/order-payment",
                                         {{"Idempotency-Key", id}, {"Content-Type", "application/json"}},
                                         body.dump());
                if (result.status == 200 || result.status == 201) return true;
                if (result.status >= 400 && result.status < 500 && result.status != 409 && result.status != 429) {
                    std::lock_guard lock(mutex_);
                    refusals_.push_back(id + ": " + std::to_string(result.status) + " " + result.body);
                    return false;
                }
            } catch (const std::exception&) {
            }
            ++retries_;
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        return false;
    }
    int Retries() const { return retries_.load(); }
    std::vector<std::string> Refusals() const {
        std::lock_guard lock(mutex_);
        return refusals_;
    }

  private:
    std::vector<int> ports_;
    std::atomic<int> retries_{0};
    mutable std::mutex mutex_;
    std::vector<std::string> refusals_;
};

}  // namespace

TEST_CASE("fail-over: engines and replicas killed, the broker halted, PostgreSQL restarted; no order cancelled") {
    testing::OwnPostgres pg;
    testing::OwnBroker broker;
    ExampleRig rig{broker.Brokers(), pg.Url()};
    const std::vector<int> ports{FreePort(), FreePort()};
    const std::vector<std::string> names{"engine-a", "engine-b"};
    const auto spawn_engine = [&](std::size_t i) {
        return rig.SpawnEngine(names[i], {}, {"--http", "127.0.0.1:" + std::to_string(ports[i])});
    };
    std::vector<ExampleRig::Process> engines;
    for (std::size_t i = 0; i < 2; ++i) engines.push_back(spawn_engine(i));
    // Both replicas of each service at the same moment, on a database that has none of their schemas.
    std::vector<ExampleRig::Process> orders;
    std::vector<ExampleRig::Process> payments;
    for (int i = 0; i < 2; ++i) {
        orders.push_back(rig.SpawnOrderService());
        payments.push_back(rig.SpawnPaymentService());
    }
    REQUIRE(testing::WaitFor(
        [&] {
            for (const int port : ports) {
                try {
                    if (testing::HttpRequest(port, "GET", "/healthz").status != 200) return false;
                } catch (const std::exception&) {
                    return false;
                }
            }
            return true;
        },
        std::chrono::seconds(60)));
    std::this_thread::sleep_for(std::chrono::seconds(3));  // the groups settle
    int concurrent_start_deaths = 0;
    for (const auto* group : {&orders, &payments}) {
        for (const auto& replica : *group) concurrent_start_deaths += replica->Running() ? 0 : 1;
    }
    CHECK(concurrent_start_deaths == 0);

    // Load: 25 sagas/s for 60 s from two client threads (each order retried until accepted).
    constexpr int kSagas = 1500;
    Client client(ports);
    std::atomic<int> next{0};
    std::atomic<int> accepted{0};
    std::atomic<int> lost{0};
    const auto load_start = Clock::now();
    const double load_epoch = EpochSeconds();
    const auto load = [&](int thread) {
        for (;;) {
            const int n = next++;
            if (n >= kSagas) return;
            // Steady rate: order n is due at n / 25 s after the start.
            std::this_thread::sleep_until(load_start + std::chrono::milliseconds(40 * n));
            (client.Start(n, std::chrono::seconds(120)) ? accepted : lost)++;
            static_cast<void>(thread);
        }
    };
    std::vector<std::thread> load_threads;
    for (int t = 0; t < 4; ++t) load_threads.emplace_back(load, t);

    struct Window {
        std::string what;
        double from, to;  // epoch seconds
    };
    std::vector<Window> windows;
    const auto at = [&](int seconds) { std::this_thread::sleep_until(load_start + std::chrono::seconds(seconds)); };
    const auto kill_and_restart = [&](const std::string& what, ExampleRig::Process& process, auto respawn) {
        const double from = EpochSeconds();
        process->KillAndWait(SIGKILL);
        std::this_thread::sleep_for(std::chrono::seconds(5));
        process = respawn();
        windows.push_back({what, from, EpochSeconds()});
        std::cout << "failover: " << what << " killed and restarted" << std::endl;
    };
    at(6);
    kill_and_restart("engine-a", engines[0], [&] { return spawn_engine(std::size_t{0}); });
    at(14);
    kill_and_restart("a payment replica", payments[0], [&] { return rig.SpawnPaymentService(); });
    at(22);
    kill_and_restart("an order replica", orders[0], [&] { return rig.SpawnOrderService(); });
    at(30);
    {
        const double from = EpochSeconds();
        REQUIRE(broker.Run("halt " + broker.State() + " >/dev/null") == 0);
        std::this_thread::sleep_for(std::chrono::seconds(10));
        REQUIRE(broker.Run("resume " + broker.State() + " >/dev/null") == 0);
        windows.push_back({"broker halted 10 s", from, EpochSeconds()});
        std::cout << "failover: broker halted 10 s and resumed" << std::endl;
    }
    at(48);
    {
        const double from = EpochSeconds();
        REQUIRE(pg.Restart() == 0);
        windows.push_back({"PostgreSQL restart", from, EpochSeconds()});
        std::cout << "failover: PostgreSQL restarted" << std::endl;
    }
    const auto last_fault = Clock::now();
    for (auto& thread : load_threads) thread.join();
    const double load_end_epoch = EpochSeconds();
    std::cout << "failover: " << accepted.load() << " sagas started, " << client.Retries()
              << " start retries; waiting for every saga to end" << std::endl;
    CHECK(accepted.load() == kSagas);
    CHECK(lost.load() == 0);
    CHECK(client.Refusals().empty());
    for (const auto& refusal : client.Refusals()) MESSAGE("refused: " << refusal);

    // Every saga ends within the bound after the last fault.
    constexpr auto kEndBound = std::chrono::seconds(120);
    const bool ended = testing::WaitFor(
        [&] {
            try {
                return rig.Open() == 0;
            } catch (const std::exception&) {
                return false;
            }
        },
        kEndBound);
    const double all_ended_after = std::chrono::duration<double>(Clock::now() - last_fault).count();
    rig.WaitQuiet(std::chrono::seconds(30));
    std::this_thread::sleep_for(std::chrono::seconds(2));  // late duplicates

    pqxx::connection conn{rig.DbUrl()};
    pqxx::read_transaction tx{conn};
    const auto number = [&](const std::string& sql) {
        const auto row = tx.exec1(sql);
        return row[0].is_null() ? 0.0 : row[0].as<double>();
    };
    const double sagas = number("SELECT count(*) FROM saga_instance");
    const double declined_by_design =
        number("SELECT count(*) FROM saga_instance WHERE status = 'compensated' AND (input->>'amount')::numeric > 500");
    const double extra_compensated =
        number("SELECT count(*) FROM saga_instance WHERE status <> 'completed' AND (input->>'amount')::numeric <= 500");
    const double over_limit_completed =
        number("SELECT count(*) FROM saga_instance WHERE status = 'completed' AND (input->>'amount')::numeric > 500");
    const double keys_twice =
        number("SELECT count(*) FROM (SELECT 1 FROM saga_instance GROUP BY idempotency_key HAVING count(*) > 1) d");
    const double timeouts = number("SELECT count(*) FROM saga_timeline WHERE kind = 'timeout'");
    const double waits = number("SELECT count(*) FROM saga_timeline WHERE kind = 'waiting-for-participant'");
    const double resends = number("SELECT count(*) FROM saga_timeline WHERE kind = 'resent'");
    // Publication delay of each outbox: overall, and for rows published once, outside the broker
    // halt and the PostgreSQL restart (rows written then cannot be published, or marked, before
    // those end). A row published more than once — a resend, or a participant answering a
    // redelivered command with its stored reply — is re-armed: its published_at is then its last
    // publication, not its first, so it says nothing about a stall and is counted apart.
    std::string outside = "attempts = 1";
    for (const auto& w : windows) {
        if (w.what == "broker halted 10 s" || w.what == "PostgreSQL restart") {
            outside += " AND NOT (extract(epoch FROM created_at) BETWEEN " + std::to_string(w.from - 2) + " AND " +
                       std::to_string(w.to + 3) + ")";
        }
    }
    struct Delays {
        double worst = 0, worst_first = 0, republished = 0;
    };
    std::map<std::string, Delays> delays;
    std::string worst_rows;  // where the slowest first publications were written, relative to the faults
    for (const std::string table : {"outbox", "orders.outbox", "payments.outbox"}) {
        delays[table] = {
            number("SELECT max(extract(epoch FROM published_at - created_at)) FROM " + table),
            number("SELECT max(extract(epoch FROM published_at - created_at)) FROM " + table + " WHERE " + outside),
            number("SELECT count(*) FROM " + table + " WHERE attempts > 1")};
        for (const auto& row :
             tx.exec("SELECT extract(epoch FROM created_at)::float8, extract(epoch FROM published_at "
                     "- created_at)::float8 FROM " +
                     table + " WHERE " + outside + " ORDER BY published_at - created_at DESC LIMIT 1")) {
            worst_rows += "  " + table + ": slowest first publication written at +" +
                          std::to_string(row[0].as<double>() - load_epoch) + " s, published " +
                          std::to_string(row[1].as<double>()) + " s later\n";
        }
    }
    // How long each consumer group stopped consuming while the load ran: the longest gap between
    // consecutive applications (participants: participant_step.applied_at; engines: the replies in
    // the timelines), overall and not overlapping the broker halt or the PostgreSQL restart. With
    // the eager protocol a killed member stopped its whole group for up to a session timeout.
    std::string quiet_windows = "true";
    for (const auto& w : windows) {
        if (w.what == "broker halted 10 s" || w.what == "PostgreSQL restart") {
            quiet_windows +=
                " AND NOT (s < " + std::to_string(w.to + 3) + " AND e > " + std::to_string(w.from - 2) + ")";
        }
    }
    std::map<std::string, std::pair<double, double>> stalls;  // longest gap overall, outside those windows
    for (const auto& [name, times] : std::map<std::string, std::string>{
             {"engines (replies)", "SELECT at AS t FROM saga_timeline WHERE kind = 'reply'"},
             {"order service", "SELECT applied_at AS t FROM orders.participant_step"},
             {"payment service", "SELECT applied_at AS t FROM payments.participant_step"}}) {
        const std::string gaps =
            "SELECT extract(epoch FROM lag(t) OVER (ORDER BY t))::float8 AS s, extract(epoch FROM "
            "t)::float8 AS e FROM (" +
            times + ") x";
        const std::string during =
            "s IS NOT NULL AND e BETWEEN " + std::to_string(load_epoch + 1) + " AND " + std::to_string(load_end_epoch);
        stalls[name] = {number("SELECT max(e - s) FROM (" + gaps + ") g WHERE " + during),
                        number("SELECT max(e - s) FROM (" + gaps + ") g WHERE " + during + " AND " + quiet_windows)};
    }
    const auto report = rig.Audit();

    std::cout << "failover figures:\n"
              << "  sagas " << sagas << "; declined by design and compensated " << declined_by_design
              << "; compensated or failed beyond those " << extra_compensated << " (target 0)\n"
              << "  all sagas ended " << all_ended_after << " s after the last fault (bound " << kEndBound.count()
              << " s)\n"
              << "  timeouts " << timeouts << ", waits for a participant " << waits << ", resends " << resends
              << ", start retries " << client.Retries() << "\n";
    for (const auto& [table, d] : delays) {
        std::cout << "  " << table << ": worst publication delay " << d.worst << " s; first publications outside "
                  << "the broker halt and the PostgreSQL restart " << d.worst_first << " s; rows published again "
                  << "(resends, replayed replies) " << d.republished << "\n";
    }
    for (const auto& [name, gap] : stalls) {
        std::cout << "  " << name << ": longest pause in consumption " << gap.first << " s; outside the broker halt "
                  << "and the PostgreSQL restart " << gap.second << " s\n";
    }
    std::cout << "  faults (s after the load started):";
    for (const auto& w : windows)
        std::cout << " " << w.what << " +" << w.from - load_epoch << "..+" << w.to - load_epoch << ";";
    std::cout << "\n" << worst_rows << report.Summary() << std::flush;

    CHECK(ended);
    CHECK(sagas == kSagas);
    CHECK(declined_by_design == kSagas / 10);
    CHECK(over_limit_completed == 0);
    CHECK(extra_compensated == 0);
    // No participant here is slow: every timeout is one the faults caused. The two clocks hold them
    // (with `startTimeout: 1s` in the saga, which leaves the timeouts counting from dispatch, this
    // run had 158 timeouts and 150 resends); a few remain possible, e.g. a replica killed after it
    // reached a command and before it answered.
    CHECK(timeouts <= kSagas / 100);
    CHECK(keys_twice == 0);
    for (const auto& [table, d] : delays) {
        INFO(table);
        CHECK(d.worst <= 30.0);       // the 10 s halt and the restart, plus reconnecting and draining
        CHECK(d.worst_first <= 5.0);  // a killed writer or relay leader never holds publication back
    }
    for (const auto& [name, gap] : stalls) {
        INFO(name);
        // A killed member never stops its group: what this guards against is a stop-the-world
        // rebalance, which pauses a group for a session timeout (10 s) or more. Measured 0.3-2.5 s on
        // two shared cores running eight processes besides the broker and PostgreSQL.
        CHECK(gap.second <= 5.0);
    }
    CHECK(report.Ok());
    for (auto& p : engines) p->KillAndWait(SIGTERM);
    for (auto& p : orders) p->KillAndWait(SIGTERM);
    for (auto& p : payments) p->KillAndWait(SIGTERM);
}
