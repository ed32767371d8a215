// Relay throughput and commit-to-mark latency beside raw librdkafka produce throughput with the
// relay's producer settings (idempotence, acks=all, linger.ms=0), in one run, same broker.
//
//   relay_bench DB_URL BROKERS [--events N] [--json FILE]
//
// raw      N messages of an envelope's size straight through librdkafka: the limit.
// relay    N rows committed first (batches of 100), then the relay drains them: rows/s from the
//          relay's start to the last acknowledgement.
// latency  the relay idles armed; single-row transactions commit every 5 ms for 10 s; latency is
//          published_at minus the client's commit time. published_at is set by the mark, after the
//          broker's acknowledgement; an idle relay's mark waits up to 10 ms for a claim to ride with.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <thread>

#include "outbox/detail/rdkafka.hpp"
#include "outbox/relay.hpp"
#include "outbox/uuid.hpp"
#include "outbox/writer.hpp"
#include "store/migrations.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow;
using Clock = std::chrono::system_clock;

namespace {

outbox::CloudEvent Event(int i) {
    outbox::CloudEvent event;
    event.type = "ChargePayment.v1";
    event.source = "sagaflow/bench";
    event.saga_id = outbox::NewUuidV7();
    event.step_name = "charge-payment";
    event.phase = "action";
    event.data = {{"orderId", "order-" + std::to_string(i)}, {"amount", "49.90"}, {"currency", "EUR"}};
    return event;
}

double RawProduce(const std::string& brokers, const std::string& topic, int n) {
    outbox::RelayOptions options;
    options.brokers = brokers;
    int delivered = 0;
    auto conf = outbox::detail::MakeConf(outbox::RelayProducerProperties(options));
    rd_kafka_conf_set_opaque(conf.get(), &delivered);
    rd_kafka_conf_set_dr_msg_cb(conf.get(), [](rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) ++*static_cast<int*>(opaque);
    });
    auto producer = outbox::detail::MakeClient(RD_KAFKA_PRODUCER, std::move(conf));
    std::vector<std::string> values;
    for (int i = 0; i < n; ++i) values.push_back(Event(i).ToJson().dump());
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
        const std::string key = "saga-" + std::to_string(i % 64);
        while (outbox::detail::Produce(
                   producer.get(), topic, key, values[static_cast<std::size_t>(i)], nullptr, nullptr) ==
               RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(producer.get(), 10);
        }
        rd_kafka_poll(producer.get(), 0);
    }
    rd_kafka_flush(producer.get(), 120'000);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return delivered / seconds;
}

long long Unpublished(pqxx::connection& conn) {
    pqxx::read_transaction tx{conn};
    return tx.exec1("SELECT count(*) FROM outbox WHERE published_at IS NULL")[0].as<long long>();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: relay_bench DB_URL BROKERS [--events N] [--json FILE]\n");
        return 2;
    }
    const std::string url = argv[1];
    const std::string brokers = argv[2];
    int events = 50'000;
    std::string json_path;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (std::string(argv[i]) == "--events") events = std::stoi(argv[i + 1]);
        if (std::string(argv[i]) == "--json") json_path = argv[i + 1];
    }
    store::MigrateBlocking(url, store::BuiltinMigrations());
    pqxx::connection conn{url};
    {
        pqxx::work tx{conn};
        tx.exec("TRUNCATE outbox");
        tx.commit();
    }
    // Topics exist before anything is timed: auto-creation on first produce costs about a second.
    for (const char* topic : {"bench-raw", "bench-relay", "bench-latency"}) testing::CreateTopic(brokers, topic, 4);
    const double raw = RawProduce(brokers, "bench-raw", events);
    std::fprintf(stderr, "raw produce: %.0f msg/s\n", raw);

    for (int n = 0; n < events; n += 100) {
        pqxx::work tx{conn};
        for (int i = n; i < n + 100; ++i)
            outbox::Enqueue(tx, "bench-relay", "saga-" + std::to_string(i % 64), Event(i));
        tx.commit();
    }
    outbox::RelayOptions options;
    options.db_url = url;
    options.brokers = brokers;
    double relay_rate = 0;
    {
        outbox::Relay relay{options};
        const auto start = std::chrono::steady_clock::now();
        relay.Start();
        while (Unpublished(conn) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        pqxx::read_transaction tx{conn};
        const double seconds =
            tx.exec1("SELECT extract(epoch FROM max(published_at) - min(published_at)) FROM outbox")[0].as<double>();
        tx.commit();
        // The span between the first and the last acknowledgement, plus the first batch's time.
        relay_rate = events / std::max(seconds, 1e-3);
        std::fprintf(stderr,
                     "relay drain: %.0f rows/s (wall %.2f s incl. startup)\n",
                     relay_rate,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        relay.Stop();
    }

    std::vector<double> latencies_ms;
    {
        outbox::Relay relay{options};
        relay.Start();
        {  // warm up: the producer has its id and the topic its leaders before anything is timed
            pqxx::work tx{conn};
            outbox::Enqueue(tx, "bench-latency", "saga-x", Event(0));
            tx.commit();
            while (Unpublished(conn) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        std::vector<std::pair<std::string, Clock::time_point>> committed;
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (std::chrono::steady_clock::now() < end) {
            pqxx::work tx{conn};
            const std::string id = outbox::Enqueue(tx, "bench-latency", "saga-x", Event(0));
            tx.commit();
            committed.emplace_back(id, Clock::now());
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        while (Unpublished(conn) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        relay.Stop();
        pqxx::read_transaction tx{conn};
        for (const auto& [id, at] : committed) {
            const double published = tx.exec_params1(
                                           "SELECT extract(epoch FROM published_at) FROM outbox WHERE "
                                           "event_id = $1::uuid",
                                           id)[0]
                                         .as<double>();
            const double commit = std::chrono::duration<double>(at.time_since_epoch()).count();
            latencies_ms.push_back((published - commit) * 1000.0);
        }
    }
    if (std::getenv("RELAY_BENCH_TRACE")) {
        for (std::size_t i = 0; i < latencies_ms.size(); ++i) {
            if (latencies_ms[i] > 100) std::fprintf(stderr, "slow sample %zu: %.1f ms\n", i, latencies_ms[i]);
        }
    }
    std::sort(latencies_ms.begin(), latencies_ms.end());
    const auto pct = [&](double p) {
        return latencies_ms[static_cast<std::size_t>(p * static_cast<double>(latencies_ms.size() - 1))];
    };
    std::fprintf(stderr,
                 "commit-to-mark latency over %zu rows: p50 %.1f ms, p99 %.1f ms\n",
                 latencies_ms.size(),
                 pct(0.5),
                 pct(0.99));
    const nlohmann::json result{{"benchmark", "relay"},
                                {"events", events},
                                {"raw_produce_per_second", raw},
                                {"relay_rows_per_second", relay_rate},
                                {"ratio", relay_rate / raw},
                                {"latency_samples", latencies_ms.size()},
                                {"latency_p50_ms", pct(0.5)},
                                {"latency_p99_ms", pct(0.99)}};
    std::fprintf(stderr, "ratio relay/raw: %.2f\n", relay_rate / raw);
    if (!json_path.empty()) std::ofstream(json_path) << result.dump(2) << "\n";
    std::cout << result.dump() << "\n";
    return 0;
}
