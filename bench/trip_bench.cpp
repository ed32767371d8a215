// The trip-booking saga as a straight line (bench/sagas/trip-booking-linear.yaml: six steps one
// after another) against the graph (sagas/trip-booking.yaml: the holds side by side, the
// confirmations side by side; its insurance is off here, so both do the same six commands), same
// engine, same participants (examples/trip-booking, in this process), same run.
//
//   trip_bench DB_URL BROKERS --json OUT --source DIR [--seconds S] [--warmup S] [--runs N] [--inflight N]
//
// A closed loop of the linear saga finds the maximum; then each saga runs open loop at a quarter of
// it, alternating linear and graph `--runs` times. Latency is start-to-terminal from the database's
// own timestamps (saga_instance.created_at .. updated_at of the terminal write).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <random>
#include <thread>

#include "engine/engine.hpp"
#include "examples/trip-booking/trip_participants.hpp"

namespace {

using Clock = std::chrono::steady_clock;

std::string Read(const std::filesystem::path& path) {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

nlohmann::json Input(const std::string& trip_id) {
    return {{"tripId", trip_id},
            {"traveller", {{"name", "Ada"}, {"email", "ada@example.com"}}},
            {"hotel", {{"hotelId", "grand"}, {"nights", 3}}},
            {"flights", {{{"flightNo", "LH100"}, {"date", "2027-01-10"}}}},
            {"total", "1200.00"},
            {"insurance", false}};
}

long long Open(pqxx::connection& c) {
    pqxx::work tx(c);
    return tx.exec1("SELECT count(*) FROM saga_instance WHERE status IN ('running', 'compensating')")[0]
        .as<long long>();
}

struct Latency {
    double mean = 0, p50 = 0, p99 = 0;
    long long sagas = 0, completed = 0;
};

Latency Measure(pqxx::connection& c, const std::string& type, const std::string& first_id) {
    pqxx::work tx(c);
    const auto row = tx.exec_params1(
        "SELECT count(*), count(*) FILTER (WHERE status = 'completed'), avg(ms), "
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) FROM "
        "(SELECT status, extract(epoch FROM updated_at - created_at) * 1000 AS ms FROM saga_instance WHERE "
        "saga_type = $1 AND saga_id >= $2::uuid) s",
        type,
        first_id);
    Latency l;
    l.sagas = row[0].as<long long>();
    l.completed = row[1].as<long long>();
    if (l.sagas > 0) l.mean = row[2].as<double>(), l.p50 = row[3].as<double>(), l.p99 = row[4].as<double>();
    return l;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: trip_bench DB_URL BROKERS --json OUT --source DIR [--seconds S] ...\n");
        return 2;
    }
    const std::string url = argv[1], brokers = argv[2];
    std::string json_path, source = ".";
    int seconds = 20, warmup = 5, runs = 3, inflight = 32;
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--json") json_path = argv[i + 1];
        if (flag == "--source") source = argv[i + 1];
        if (flag == "--seconds") seconds = std::stoi(argv[i + 1]);
        if (flag == "--warmup") warmup = std::stoi(argv[i + 1]);
        if (flag == "--runs") runs = std::stoi(argv[i + 1]);
        if (flag == "--inflight") inflight = std::stoi(argv[i + 1]);
    }
    const std::string suffix = "b" + std::to_string(std::random_device{}() % 1'000'000);
    sagaflow::EngineConfig config;
    config.database_url = url;
    config.kafka_brokers = brokers;
    config.replies_topic = "trip-bench-replies-" + suffix;
    config.consumer_group = "trip-bench-" + suffix;
    sagaflow::Engine engine(config);
    const std::string graph =
        trip::WithParticipantSuffix(Read(std::filesystem::path(source) / "sagas/trip-booking.yaml"), suffix);
    std::string linear = trip::WithParticipantSuffix(
        Read(std::filesystem::path(source) / "bench/sagas/trip-booking-linear.yaml"), suffix);
    linear.replace(linear.find("saga: trip-booking"), 18, "saga: trip-booking-linear");
    engine.RegisterDefinition(graph, "trip-booking.yaml");
    engine.RegisterDefinition(linear, "trip-booking-linear.yaml");
    engine.Start();
    sagaflow::ParticipantConfig base;
    base.database_url = url;
    base.kafka_brokers = brokers;
    base.replies_topic = config.replies_topic;
    std::vector<std::unique_ptr<sagaflow::Participant>> participants;
    for (const auto& role : trip::kParticipants) {
        base.name = role + "-" + suffix;
        participants.push_back(trip::Make(role, base));
        participants.back()->Start();
    }
    pqxx::connection db(url);
    long long n = 0;
    const auto start = [&](const std::string& type) {
        const auto r = engine.StartSaga(type, Input("trip-" + suffix + "-" + std::to_string(n++)), "");
        if (r.status != sagaflow::StartResult::Status::kStarted) throw std::runtime_error(r.message);
        return r.saga_id;
    };
    const auto quiet = [&] {
        while (Open(db) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    };

    // The maximum: the linear saga with `inflight` kept open.
    for (int i = 0; i < inflight; ++i) start("trip-booking-linear");
    std::this_thread::sleep_for(std::chrono::seconds(warmup));
    const std::string closed_first = start("trip-booking-linear");
    const auto closed_from = Clock::now();
    while (Clock::now() - closed_from < std::chrono::seconds(seconds)) {
        for (long long open = Open(db); open < inflight; ++open) start("trip-booking-linear");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const double closed_elapsed = std::chrono::duration<double>(Clock::now() - closed_from).count();
    quiet();
    const auto closed = Measure(db, "trip-booking-linear", closed_first);
    const double maximum = static_cast<double>(closed.sagas) / closed_elapsed;
    const double rate = maximum / 4;
    std::fprintf(stderr,
                 "closed loop (linear, %d in flight): %.1f sagas/s; open loop at %.1f sagas/s\n",
                 inflight,
                 maximum,
                 rate);

    nlohmann::json results = nlohmann::json::array();
    for (int run = 0; run < runs; ++run) {
        for (const std::string type : {"trip-booking-linear", "trip-booking"}) {
            const auto interval = std::chrono::duration<double>(1.0 / rate);
            auto next = Clock::now();
            const auto warm_end = next + std::chrono::seconds(warmup);
            const auto end = warm_end + std::chrono::seconds(seconds);
            std::string first;
            while (Clock::now() < end) {
                const std::string id = start(type);
                if (first.empty() && Clock::now() >= warm_end) first = id;
                next += std::chrono::duration_cast<Clock::duration>(interval);
                std::this_thread::sleep_until(next);
            }
            quiet();
            const auto l = Measure(db, type, first);
            std::fprintf(stderr,
                         "run %d %-20s sagas %lld completed %lld mean %.1f p50 %.1f p99 %.1f ms\n",
                         run + 1,
                         type.c_str(),
                         l.sagas,
                         l.completed,
                         l.mean,
                         l.p50,
                         l.p99);
            results.push_back({{"run", run + 1},
                               {"saga", type},
                               {"rate", rate},
                               {"sagas", l.sagas},
                               {"completed", l.completed},
                               {"meanMs", l.mean},
                               {"p50Ms", l.p50},
                               {"p99Ms", l.p99}});
        }
    }
    for (auto& p : participants) p->Stop();
    engine.Stop();
    const nlohmann::json out{{"bench", "trip"},
                             {"closedLoop", {{"inflight", inflight}, {"sagasPerSecond", maximum}}},
                             {"openLoopRate", rate},
                             {"seconds", seconds},
                             {"warmup", warmup},
                             {"runs", results}};
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    std::cout << out.dump(2) << "\n";
    return 0;
}
