#include "tools/cli/demo.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <map>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "engine/engine.hpp"
#include "outbox/detail/rdkafka.hpp"
#include "outbox/embedded_kafka.hpp"
#include "outbox/uuid.hpp"
#include "store/migrations.hpp"
#include "tools/audit.hpp"
#include "tools/child_process.hpp"

namespace sagaflow::cli {
namespace {

using Clock = std::chrono::steady_clock;

const Clock::time_point g_start = Clock::now();

void Say(const std::string& line) {
    const double seconds = std::chrono::duration<double>(Clock::now() - g_start).count();
    std::cout << fmt::format("[demo {:6.1f}s] {}", seconds, line) << std::endl;
}

struct Planned {
    std::string order_id;
    std::string key;
    nlohmann::json input;
    std::string expected;  // completed | compensated
    std::string note;
    std::string saga_id;
};

long long Scalar(pqxx::connection& conn, const std::string& sql) {
    pqxx::read_transaction tx{conn};
    return tx.exec1(sql)[0].as<long long>();
}

// Re-publishes the already published commands of some sagas, as a relay that crashed after
// publishing and before marking would: same event id, same bytes. The participants' inboxes must
// drop them.
class Duplicator {
  public:
    Duplicator(std::string db_url, const std::string& brokers)
        : db_url_(std::move(db_url)),
          producer_(outbox::detail::MakeClient(
              RD_KAFKA_PRODUCER,
              outbox::detail::MakeProducerConf(
                  {{"bootstrap.servers", brokers}, {"enable.idempotence", "true"}, {"log_level", "3"}}))) {}

    void Add(const std::string& saga_id) {
        std::lock_guard lock(mutex_);
        sagas_.insert(saga_id);
    }

    // Produces every command of the chosen sagas not duplicated yet; returns how many.
    int Tick() {
        std::vector<std::string> sagas;
        {
            std::lock_guard lock(mutex_);
            sagas.assign(sagas_.begin(), sagas_.end());
        }
        if (sagas.empty()) return 0;
        pqxx::connection conn{db_url_};
        pqxx::read_transaction tx{conn};
        std::string list;
        for (const auto& s : sagas) list += (list.empty() ? "'" : ",'") + s + "'";
        int produced = 0;
        for (const auto& row : tx.exec("SELECT event_id::text, topic, message_key, payload::text FROM outbox WHERE "
                                       "published_at IS NOT NULL AND topic LIKE '%.commands' AND message_key IN (" +
                                       list + ")")) {
            const std::string id = row[0].as<std::string>();
            if (!done_.insert(id).second) continue;
            outbox::detail::HeadersPtr headers{rd_kafka_headers_new(1)};
            rd_kafka_header_add(headers.get(), "content-type", -1, "application/cloudevents+json", -1);
            if (outbox::detail::Produce(producer_.get(),
                                        row[1].as<std::string>(),
                                        row[2].as<std::string>(),
                                        row[3].as<std::string>(),
                                        headers.get(),
                                        nullptr) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                static_cast<void>(headers.release());
                ++produced;
            }
        }
        rd_kafka_flush(producer_.get(), 10'000);
        return produced;
    }

  private:
    std::string db_url_;
    outbox::detail::ClientPtr producer_;
    std::mutex mutex_;
    std::set<std::string> sagas_;
    std::set<std::string> done_;
};

std::map<std::string, std::string> Statuses(pqxx::connection& conn) {
    pqxx::read_transaction tx{conn};
    std::map<std::string, std::string> out;
    for (const auto& row : tx.exec("SELECT saga_id::text, status FROM saga_instance")) {
        out[row[0].as<std::string>()] = row[1].as<std::string>();
    }
    return out;
}

// Waits until no saga is open, printing progress every second.
bool WaitQuiet(pqxx::connection& conn,
               std::chrono::seconds timeout,
               const std::function<std::string()>& extra,
               const std::function<void()>& each_second) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
        std::map<std::string, int> by;
        for (const auto& [id, status] : Statuses(conn)) ++by[status];
        const int open = by["running"] + by["compensating"];
        Say(fmt::format("sagas: {} completed, {} compensated, {} failed, {} open{}",
                        by["completed"],
                        by["compensated"],
                        by["failed"],
                        open,
                        extra()));
        if (open == 0) return true;
        if (Clock::now() > deadline) return false;
        each_second();
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
}

// Each planned saga's outcome against the plan, as a table; returns how many differ.
int ReportOutcomes(pqxx::connection& conn, const std::vector<Planned>& plan) {
    const auto statuses = Statuses(conn);
    std::map<std::string, std::pair<int, int>> table;  // status -> (actual, expected)
    int unexpected = 0;
    for (const auto& p : plan) {
        const std::string actual = statuses.count(p.saga_id) ? statuses.at(p.saga_id) : "missing";
        ++table[actual].first;
        ++table[p.expected].second;
        if (actual != p.expected) {
            ++unexpected;
            std::cout << "  saga " << p.saga_id << " (" << p.order_id << ") is " << actual << ", expected "
                      << p.expected << "\n";
        }
    }
    std::cout << "\n  outcome       sagas  expected\n  ------------  -----  --------\n";
    for (const auto& [status, counts] : table) {
        std::cout << fmt::format("  {:<12}  {:>5}  {:>8}\n", status, counts.first, counts.second);
    }
    return unexpected;
}

// One saga's timeline, milliseconds from its start.
void ShowTimeline(pqxx::connection& conn, const Planned& shown) {
    std::cout << "\n  timeline of saga " << shown.saga_id << " (" << shown.note << "):\n";
    pqxx::read_transaction tx{conn};
    for (const auto& row : tx.exec_params(
             "SELECT round(extract(epoch FROM at - min(at) OVER ()) * 1000)::bigint, kind, coalesce(step_name, ''), "
             "coalesce(phase, ''), coalesce(attempt::text, ''), detail::text FROM saga_timeline WHERE saga_id = "
             "$1::uuid ORDER BY id, seq",
             shown.saga_id)) {
        std::cout << fmt::format("  {:>7} ms  {:<16} {:<15} {:<13} {:>2}  {}\n",
                                 row[0].as<long long>(),
                                 row[1].as<std::string>(),
                                 row[2].as<std::string>(),
                                 row[3].as<std::string>(),
                                 row[4].as<std::string>(),
                                 row[5].as<std::string>() == "{}" ? "" : row[5].as<std::string>());
    }
}

// The money invariant of the sample services, as the broken parts (empty when it holds).
std::vector<std::string> MoneyViolations(pqxx::connection& conn) {
    std::vector<std::string> violations;
    const auto expect_zero = [&](const std::string& what, const std::string& sql) {
        const long long n = Scalar(conn, sql);
        if (n != 0) violations.push_back(fmt::format("{}: {}", what, n));
    };
    expect_zero("orders charged twice",
                "SELECT count(*) FROM (SELECT order_id FROM payments.payment GROUP BY order_id HAVING count(*) > 1) d");
    expect_zero("declined orders not cancelled",
                "SELECT count(*) FROM orders.orders WHERE amount > 500 AND status <> 'cancelled'");
    expect_zero("declined orders charged", "SELECT count(*) FROM payments.payment WHERE amount > 500");
    expect_zero("charges of compensated sagas not refunded",
                "SELECT count(*) FROM payments.payment p JOIN saga_instance s ON s.saga_id = p.saga_id WHERE "
                "s.status = 'compensated' AND NOT EXISTS (SELECT 1 FROM payments.refund r WHERE r.payment_id = "
                "p.payment_id)");
    expect_zero("refunds of sagas that completed",
                "SELECT count(*) FROM payments.refund r JOIN saga_instance s ON s.saga_id = r.saga_id WHERE s.status = "
                "'completed'");
    expect_zero("completed orders not approved",
                "SELECT count(*) FROM saga_instance s JOIN orders.orders o ON o.order_id = s.input->>'orderId' WHERE "
                "s.status = 'completed' AND o.status <> 'approved'");
    expect_zero("approved orders without exactly one charged payment",
                "SELECT count(*) FROM orders.orders o WHERE o.status = 'approved' AND (SELECT count(*) FROM "
                "payments.payment p WHERE p.order_id = o.order_id AND p.status = 'charged') <> 1");
    return violations;
}

}  // namespace

int RunDemo(const DemoOptions& o) {
    namespace fs = std::filesystem;
    const fs::path order_bin = fs::path(o.services_dir) / "sagaflow-order-service";
    const fs::path payment_bin = fs::path(o.services_dir) / "sagaflow-payment-service";
    const bool node = o.payment_service == "node";
    for (const auto& bin : {order_bin, node ? fs::path(o.node_service) : payment_bin}) {
        if (!fs::exists(bin)) {
            std::cerr << "demo: " << bin.string()
                      << " is missing. Hint: build the examples (./scripts/demo does; the TypeScript one needs "
                         "npm) or pass --services-dir / --node-service\n";
            return 1;
        }
    }
    if (node && o.kafka.empty()) {
        std::cerr << "demo: the TypeScript payment service (kafkajs) cannot use the embedded Kafka (librdkafka's mock "
                     "cluster). Hint: pass --kafka HOST:PORT; ./scripts/demo --payment-service node starts a private "
                     "broker\n";
        return 1;
    }
    const std::string run = outbox::NewUuidV7().substr(24);  // order ids unique to this run
    const fs::path logs = fs::temp_directory_path() / ("sagaflow-demo-" + run);
    fs::create_directories(logs);

    std::unique_ptr<outbox::EmbeddedKafka> embedded;
    std::string brokers = o.kafka;
    if (brokers.empty()) {
        embedded = std::make_unique<outbox::EmbeddedKafka>(1);
        embedded->CreateTopics({"order.commands", "payment.commands", "sagaflow.replies"}, 6);
        brokers = embedded->Brokers();
        Say("embedded Kafka (librdkafka mock cluster) at " + brokers);
    } else {
        Say("Kafka at " + brokers);
    }
    const std::string slow_order = "order-" + run + "-slow";
    const std::string cancelled_order = "order-" + run + "-cancelled";
    const auto spawn = [&](const fs::path& bin, const std::string& name, std::vector<std::string> extra) {
        // A restarted service takes its partitions back at once (static membership); a dead one
        // loses them after 6 s instead of librdkafka's default 45 s.
        std::vector<std::string> args{"--db",
                                      o.db_url,
                                      "--brokers",
                                      brokers,
                                      "--consumer-property",
                                      "group.instance.id=" + name + "-1",
                                      "--consumer-property",
                                      "session.timeout.ms=6000"};
        if (embedded) args.emplace_back("--no-create-topics");
        args.insert(args.end(), extra.begin(), extra.end());
        if (bin.extension() == ".js") {  // the TypeScript service: node runs it
            args.insert(args.begin(), {"node", bin.string()});
            return std::make_unique<detail::ChildProcess>("/usr/bin/env", args, (logs / (name + ".log")).string());
        }
        return std::make_unique<detail::ChildProcess>(bin.string(), args, (logs / (name + ".log")).string());
    };
    auto order = spawn(order_bin, "order-service", {});
    const std::vector<std::string> payment_args{
        "--slow-order", slow_order + ":20000", "--slow-order", cancelled_order + ":4000", "--limit", "500"};
    // The TypeScript service keeps the protocol's tables in schema payments (made as a participant
    // outside C++ makes them, by `sagaflow migrate`) and `sagaflow relay` publishes its replies.
    std::unique_ptr<detail::ChildProcess> payment_relay;
    if (node) {
        const std::string url =
            o.db_url + (o.db_url.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3Dpayments";
        store::MigrateBlocking(url, store::BuiltinMigrations());
        payment_relay =
            std::make_unique<detail::ChildProcess>(fs::read_symlink("/proc/self/exe").string(),
                                                   std::vector<std::string>{"relay", "--db", url, "--brokers", brokers},
                                                   (logs / "payment-relay.log").string());
    }
    const fs::path payment_program = node ? fs::path(o.node_service) : payment_bin;
    auto payment = spawn(payment_program, "payment-service", payment_args);
    Say(std::string("order service (schema orders) and ") + (node ? "TypeScript " : "") +
        "payment service (schema payments) started; logs in " + logs.string());

    EngineConfig config;
    config.database_url = o.db_url;
    config.kafka_brokers = brokers;
    config.instance_id = "demo-engine";
    config.create_topics = embedded == nullptr;
    config.kafka_properties["log_level"] = "3";
    // The HTTP API and the console on loopback: without tokens a loopback client is an operator.
    config.http.enabled = true;
    config.http.address = "127.0.0.1";
    config.http.port = o.http_port;
    Engine engine{config};
    engine.RegisterDefinitionFile(o.saga_file);
    engine.Start();
    const std::string console = "http://127.0.0.1:" + std::to_string(engine.HttpPort()) + "/ui/";
    Say("engine started with " + o.saga_file + "; console at " + console);

    pqxx::connection conn{o.db_url};
    Duplicator duplicator{o.db_url, brokers};
    std::atomic<int> duplicated{0};
    int replayed_starts = 0;
    int restarts = 0;
    std::vector<Planned> plan;
    for (int i = 0; i < o.sagas; ++i) {
        Planned p;
        p.order_id = fmt::format("order-{}-{:03}", run, i);
        p.key = "client-" + p.order_id;
        const bool declined = i % 5 == 4;
        p.input = {{"orderId", p.order_id},
                   {"customerId", 100 + i % 8},
                   {"amount", declined ? "900.00" : fmt::format("{}.90", 20 + i)}};
        p.expected = declined ? "compensated" : "completed";
        p.note = declined ? "declined (over the limit)" : "";
        plan.push_back(std::move(p));
    }
    // The client bug of rule X3: the same order started again under another key. The payment
    // table's UNIQUE catches the second charge; that saga observes the first payment.
    Planned x3 = plan[2];
    x3.key = "client-retry-with-new-key";
    x3.note = "same order as #2 under another key";

    Say(
        fmt::format("starting {} order-payment sagas: every 5th declined, every 4th with its commands delivered "
                    "twice, every 6th started twice with the same key, the payment service killed and restarted "
                    "halfway",
                    o.sagas + 1));
    for (std::size_t i = 0; i < plan.size(); ++i) {
        auto& p = plan[i];
        const auto r = engine.StartSaga("order-payment", p.input, p.key);
        if (!r.Accepted()) {
            std::cerr << "demo: saga not started: " << r.message << "\n";
            return 1;
        }
        p.saga_id = r.saga_id;
        if (i % 6 == 0) {  // an HTTP client's retry: the same key and body
            const auto again = engine.StartSaga("order-payment", p.input, p.key);
            if (again.status == StartResult::Status::kReplayed && again.saga_id == p.saga_id) ++replayed_starts;
        }
        if (i % 4 == 1) duplicator.Add(p.saga_id);
        if (i == plan.size() / 2) {
            payment->KillAndWait(SIGKILL);
            Say("payment service killed (SIGKILL)");
            std::this_thread::sleep_for(std::chrono::seconds(1));
            payment = spawn(payment_program, "payment-service", payment_args);
            ++restarts;
            Say("payment service restarted");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(40));
    }
    {
        const auto r = engine.StartSaga("order-payment", x3.input, x3.key);
        x3.saga_id = r.saga_id;
        plan.push_back(x3);
    }
    const auto extra = [&] { return fmt::format(" · duplicate commands injected {}", duplicated.load()); };
    const auto tick = [&] { duplicated += duplicator.Tick(); };
    bool quiet = WaitQuiet(conn, std::chrono::seconds(150), extra, tick);
    duplicated += duplicator.Tick();

    // A customer cancels while the provider is charging (4 s): the charge is refunded, whether it
    // lands before the refund arrives or (refused by the participant's anti-hanging guard) not at all.
    // The last two sagas each run alone and end compensated, their charges refunded.
    const auto compensated =
        [](const std::string& order_id, int customer, const std::string& amount, std::string note) {
            Planned p;
            p.order_id = order_id;
            p.key = "client-" + order_id;
            p.input = {{"orderId", order_id}, {"customerId", customer}, {"amount", amount}};
            p.expected = "compensated";
            p.note = std::move(note);
            return p;
        };
    Planned cancelled =
        compensated(cancelled_order, 998, "42.00", "cancelled by the customer while being charged: refunded");
    if (quiet) {
        Say("one more saga, cancelled by its customer while the provider is charging it");
        cancelled.saga_id = engine.StartSaga("order-payment", cancelled.input, cancelled.key).saga_id;
        plan.push_back(cancelled);
        const auto charging = [&] {
            return Scalar(conn,
                          "SELECT count(*) FROM saga_step WHERE saga_id = '" + cancelled.saga_id +
                              "' AND step_name = 'charge-payment'") > 0;
        };
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!charging() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        const auto result = engine.CancelSaga(cancelled.saga_id, "the customer cancelled the order");
        Say("cancel: " + result.message);
        quiet = WaitQuiet(conn, std::chrono::seconds(60), extra, [] {});
    }

    // The slow provider: its charge takes 20 s, four times the step timeout. The first attempt times
    // out and is resent; the resend waits behind the payment service's work on the first delivery
    // (waiting-for-participant: the participant is busy, so its clock does not run) and gets the
    // stored reply: completed, charged once, nothing refunded.
    Planned slow =
        compensated(slow_order, 999, "30.00", "provider slower than the step timeout: waited for, charged once");
    slow.expected = "completed";
    if (quiet) {
        Say("one more saga whose payment provider is slower than the step timeout (20 s > 5 s)");
        slow.saga_id = engine.StartSaga("order-payment", slow.input, slow.key).saga_id;
        plan.push_back(slow);
        quiet = WaitQuiet(conn, std::chrono::seconds(120), extra, [] {});
    }
    // Let late duplicates drain before the audit.
    std::this_thread::sleep_for(std::chrono::seconds(2));

    const int unexpected = ReportOutcomes(conn, plan);
    {
        pqxx::read_transaction tx{conn};
        const auto orders = tx.exec1(
            "SELECT count(*) FILTER (WHERE status = 'approved'), count(*) FILTER (WHERE status = 'cancelled') FROM "
            "orders.orders");
        const auto money = tx.exec1(
            "SELECT (SELECT count(*) FROM payments.payment), (SELECT count(*) FROM payments.refund), "
            "(SELECT count(*) FROM payments.participant_step WHERE status = 'null_compensation')");
        std::cout << fmt::format(
            "\n  orders approved {}, cancelled {} · payments {}, refunds {} · client retries replayed {} · duplicate "
            "commands injected {} · participant restarts {}\n",
            orders[0].as<long long>(),
            orders[1].as<long long>(),
            money[0].as<long long>(),
            money[1].as<long long>(),
            replayed_starts,
            duplicated.load(),
            restarts);
    }
    for (const auto* shown : {&cancelled, &slow}) {
        if (!shown->saga_id.empty()) ShowTimeline(conn, *shown);
    }
    std::vector<std::string> violations = MoneyViolations(conn);
    AuditOptions audit;
    audit.db_url = o.db_url;
    audit.participant_schemas = {"orders", "payments"};
    audit.payments_schema = "payments";
    const auto report = AuditBlocking(audit);
    std::cout << "\n" << report.Summary();
    if (!report.Ok()) violations.push_back("the audit found broken guarantees (above)");
    const long long refunded = Scalar(conn, "SELECT count(*) FROM payments.refund");
    const long long declined = Scalar(conn, "SELECT count(*) FROM orders.orders WHERE amount > 500");

    std::cout << "\n";
    if (!quiet) violations.push_back("sagas still open at the end of the wait");
    if (unexpected != 0) violations.push_back(fmt::format("sagas with another outcome than planned: {}", unexpected));
    for (const auto& v : violations) std::cout << "VIOLATION: " << v << "\n";
    if (violations.empty()) {
        std::cout << fmt::format(
                         "money invariant holds: no order charged twice, {} declined orders cancelled and never "
                         "charged, {} charge(s) of compensated sagas refunded exactly once",
                         declined,
                         refunded)
                  << std::endl;
    } else {
        std::cout << "money invariant BROKEN; service logs kept in " << logs.string() << "\n";
    }
    std::cout << "console: " << console << std::endl;
    if (o.keep_running) {
        std::cout << "the engine and both services keep running (--keep-running): open the console above; "
                     "Ctrl-C ends the demo"
                  << std::endl;
        static std::atomic<bool> stop{false};
        std::signal(SIGINT, [](int) { stop = true; });
        std::signal(SIGTERM, [](int) { stop = true; });
        while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    engine.Stop();
    order->KillAndWait(SIGTERM);
    payment->KillAndWait(SIGTERM);
    if (!violations.empty()) return 1;
    fs::remove_all(logs);
    return 0;
}

}  // namespace sagaflow::cli
