// Inbox throughput beside a plain insert of the same rows, on the same PostgreSQL, in one run.
//
//   inbox_bench URL [--events N] [--clients C] [--batch B] [--repeat R] [--json FILE]
//
// Four workloads, each with C client threads and N events in all:
//   plain-single   INSERT one row per transaction (no conflict handling): the commit-rate limit
//   inbox-single   InboxFirstTime per transaction (INSERT ... ON CONFLICT DO NOTHING RETURNING)
//   plain-batch    B rows per transaction, one INSERT ... SELECT unnest(...)
//   inbox-batch    InboxFreshIds of B ids per transaction
// Durability stays on: fsync and synchronous_commit are whatever the server has (checked: on).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "outbox/uuid.hpp"
#include "store/inbox.hpp"
#include "store/migrations.hpp"
#include "store/prepared.hpp"

namespace {

struct Options {
    std::string url;
    int events = 20000;
    int clients = 8;
    int batch = 100;
    int repeat = 3;
    std::string json_path;
};

using Work = std::function<void(pqxx::connection&, const std::vector<std::string>& ids)>;

// Runs `work` over `events` fresh ids split among the clients; returns events per second.
double MeasureOnce(const Options& o, const std::string& name, int per_tx, const Work& work) {
    std::vector<std::vector<std::vector<std::string>>> chunks(static_cast<std::size_t>(o.clients));
    for (int c = 0; c < o.clients; ++c) {
        for (int done = 0; done < o.events / o.clients; done += per_tx) {
            std::vector<std::string> ids;
            for (int i = 0; i < per_tx; ++i) ids.push_back(sagaflow::outbox::NewUuidV7());
            chunks[static_cast<std::size_t>(c)].push_back(std::move(ids));
        }
    }
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int c = 0; c < o.clients; ++c) {
        threads.emplace_back([&, c] {
            pqxx::connection conn{o.url};
            sagaflow::store::PrepareInbox(conn);
            conn.prepare("plain_one", "INSERT INTO plain_event (consumer_name, event_id) VALUES ($1, $2::uuid)");
            conn.prepare("plain_many",
                         "INSERT INTO plain_event (consumer_name, event_id) SELECT $1, unnest($2::uuid[])");
            ++ready;
            while (!go.load()) std::this_thread::yield();
            for (const auto& ids : chunks[static_cast<std::size_t>(c)]) work(conn, ids);
        });
    }
    while (ready.load() < o.clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto start = std::chrono::steady_clock::now();
    go = true;
    for (auto& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int total = (o.events / o.clients) / per_tx * per_tx * o.clients;
    const double rate = total / seconds;
    std::fprintf(stderr, "  %-13s %8d events in %6.2f s = %9.0f events/s\n", name.c_str(), total, seconds, rate);
    return rate;
}

// The median of `repeat` runs. Batched workloads get 10x the events so a run lasts long enough.
double Measure(Options o, const std::string& name, int per_tx, const Work& work) {
    if (per_tx > 1) o.events *= 10;
    std::vector<double> rates;
    for (int i = 0; i < o.repeat; ++i) rates.push_back(MeasureOnce(o, name, per_tx, work));
    std::sort(rates.begin(), rates.end());
    return rates[rates.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    if (argc < 2) {
        std::fprintf(stderr, "usage: inbox_bench URL [--events N] [--clients C] [--batch B] [--json FILE]\n");
        return 2;
    }
    o.url = argv[1];
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--events") o.events = std::stoi(argv[i + 1]);
        if (flag == "--clients") o.clients = std::stoi(argv[i + 1]);
        if (flag == "--batch") o.batch = std::stoi(argv[i + 1]);
        if (flag == "--json") o.json_path = argv[i + 1];
        if (flag == "--repeat") o.repeat = std::stoi(argv[i + 1]);
    }
    sagaflow::store::MigrateBlocking(o.url, sagaflow::store::BuiltinMigrations());
    pqxx::connection admin{o.url};
    {
        pqxx::work tx{admin};
        // The same shape as processed_event, keyed the same way, so the only difference measured is
        // the ON CONFLICT DO NOTHING RETURNING of the inbox.
        tx.exec("DROP TABLE IF EXISTS plain_event");
        tx.exec(
            "CREATE TABLE plain_event (consumer_name text NOT NULL, event_id uuid NOT NULL, processed_at "
            "timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (consumer_name, event_id))");
        tx.exec("TRUNCATE processed_event");
        tx.commit();
    }
    pqxx::read_transaction check{admin};
    const auto settings = check.exec1("SELECT current_setting('fsync'), current_setting('synchronous_commit')");
    const std::string fsync = settings[0].as<std::string>();
    const std::string sync_commit = settings[1].as<std::string>();
    check.commit();
    std::fprintf(stderr,
                 "inbox bench: %d events, %d clients, batch %d, fsync=%s synchronous_commit=%s\n",
                 o.events,
                 o.clients,
                 o.batch,
                 fsync.c_str(),
                 sync_commit.c_str());

    const double plain_single = Measure(o, "plain-single", 1, [](pqxx::connection& c, const auto& ids) {
        pqxx::work tx{c};
        tx.exec_prepared("plain_one", "bench", ids[0]);
        tx.commit();
    });
    const double inbox_single = Measure(o, "inbox-single", 1, [](pqxx::connection& c, const auto& ids) {
        pqxx::work tx{c};
        if (!sagaflow::store::InboxFirstTime(tx, "bench", ids[0])) throw std::runtime_error("duplicate");
        tx.commit();
    });
    const double plain_batch = Measure(o, "plain-batch", o.batch, [](pqxx::connection& c, const auto& ids) {
        pqxx::work tx{c};
        tx.exec_prepared("plain_many", "bench-batch", sagaflow::store::UuidArray(ids));
        tx.commit();
    });
    const double inbox_batch = Measure(o, "inbox-batch", o.batch, [](pqxx::connection& c, const auto& ids) {
        pqxx::work tx{c};
        if (sagaflow::store::InboxFreshIds(tx, "bench-batch", ids).size() != ids.size()) {
            throw std::runtime_error("duplicate");
        }
        tx.commit();
    });
    const nlohmann::json result{{"benchmark", "inbox"},
                                {"events", o.events},
                                {"clients", o.clients},
                                {"batch", o.batch},
                                {"repeat", o.repeat},
                                {"fsync", fsync},
                                {"synchronous_commit", sync_commit},
                                {"events_per_second",
                                 {{"plain_single", plain_single},
                                  {"inbox_single", inbox_single},
                                  {"plain_batch", plain_batch},
                                  {"inbox_batch", inbox_batch}}},
                                {"ratio_single", inbox_single / plain_single},
                                {"ratio_batch", inbox_batch / plain_batch},
                                {"batch_speedup", inbox_batch / inbox_single}};
    std::fprintf(stderr,
                 "  ratio inbox/plain: single %.2f, batch %.2f; inbox batch/single %.1fx\n",
                 inbox_single / plain_single,
                 inbox_batch / plain_batch,
                 inbox_batch / inbox_single);
    if (!o.json_path.empty()) std::ofstream(o.json_path) << result.dump(2) << "\n";
    std::cout << result.dump() << "\n";
    return 0;
}
