// Steps per second against a saga's length: linear sagas of 3 to 50 steps, all on one participant
// (examples' C++ SDK, a handler that only answers), a closed loop of `--inflight` sagas per length,
// same engine, same run. A reply's cost should not grow with the steps before it: steps/s flat
// within noise from 3 to 50.
//
//   length_bench DB_URL BROKERS --json OUT [--seconds S] [--warmup S] [--inflight N] [--lengths 3,10,20,50]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <random>
#include <sstream>
#include <thread>

#include "engine/engine.hpp"
#include "participant/participant.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// A straight line of `steps` retriable steps on `participant`, each sending the saga's input on.
std::string Yaml(int steps, const std::string& participant) {
    std::ostringstream out;
    out << "saga: len-" << steps << "\nversion: 1\ninput:\n  order: {type: string, required: true}\nsteps:\n";
    for (int i = 1; i <= steps; ++i) {
        out << "  - {name: s" << i << ", participant: " << participant
            << ", kind: retriable, command: Step.v1, send: {order: $.input.order}, save: {last" << i
            << ": $.reply.n}}\n";
    }
    return out.str();
}

long long Count(pqxx::connection& c, const std::string& sql) {
    pqxx::work tx(c);
    return tx.exec1(sql)[0].as<long long>();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: length_bench DB_URL BROKERS --json OUT [--seconds S] ...\n");
        return 2;
    }
    const std::string url = argv[1], brokers = argv[2];
    std::string json_path, lengths_text = "3,10,20,50";
    int seconds = 20, warmup = 5, inflight = 16;
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--json") json_path = argv[i + 1];
        if (flag == "--seconds") seconds = std::stoi(argv[i + 1]);
        if (flag == "--warmup") warmup = std::stoi(argv[i + 1]);
        if (flag == "--inflight") inflight = std::stoi(argv[i + 1]);
        if (flag == "--lengths") lengths_text = argv[i + 1];
    }
    std::vector<int> lengths;
    std::istringstream in(lengths_text);
    for (std::string part; std::getline(in, part, ',');) lengths.push_back(std::stoi(part));

    const std::string suffix = "l" + std::to_string(std::random_device{}() % 1'000'000);
    const std::string participant_name = "step-" + suffix;
    sagaflow::EngineConfig config;
    config.database_url = url;
    config.kafka_brokers = brokers;
    config.replies_topic = "length-bench-replies-" + suffix;
    config.consumer_group = "length-bench-" + suffix;
    sagaflow::Engine engine(config);
    for (const int n : lengths) engine.RegisterDefinition(Yaml(n, participant_name), "len.yaml");
    engine.Start();
    sagaflow::ParticipantConfig pc;
    pc.name = participant_name;
    pc.schema = "length_bench";
    pc.database_url = url;
    pc.kafka_brokers = brokers;
    pc.replies_topic = config.replies_topic;
    sagaflow::Participant participant(pc);
    participant.OnAction("Step.v1", [](sagaflow::Transaction&, const sagaflow::Command& c) {
        return sagaflow::StepReply::Success({{"n", c.step_name}});
    });
    participant.Start();
    pqxx::connection db(url);
    long long serial = 0;
    nlohmann::json results = nlohmann::json::array();
    for (const int n : lengths) {
        const std::string type = "len-" + std::to_string(n);
        const auto open = [&] {
            return Count(db,
                         "SELECT count(*) FROM saga_instance WHERE status = 'running' AND saga_type = '" + type + "'");
        };
        const auto completed = [&] {
            return Count(
                db, "SELECT count(*) FROM saga_instance WHERE status = 'completed' AND saga_type = '" + type + "'");
        };
        const auto top_up = [&] {
            for (long long o = open(); o < inflight; ++o) {
                engine.StartSaga(type, {{"order", "o-" + std::to_string(serial++)}}, "");
            }
        };
        const auto warm_end = Clock::now() + std::chrono::seconds(warmup);
        while (Clock::now() < warm_end) {
            top_up();
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        const long long before = completed();
        const auto from = Clock::now();
        while (Clock::now() - from < std::chrono::seconds(seconds)) {
            top_up();
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        const double elapsed = std::chrono::duration<double>(Clock::now() - from).count();
        const long long done = completed() - before;
        while (open() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const double sagas_per_s = static_cast<double>(done) / elapsed;
        std::fprintf(stderr, "%2d steps: %6.1f sagas/s, %7.1f steps/s\n", n, sagas_per_s, sagas_per_s * n);
        results.push_back({{"steps", n}, {"sagasPerSecond", sagas_per_s}, {"stepsPerSecond", sagas_per_s * n}});
    }
    participant.Stop();
    engine.Stop();
    const nlohmann::json out{{"bench", "length"}, {"inflight", inflight}, {"seconds", seconds}, {"lengths", results}};
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    std::cout << out.dump(2) << "\n";
    return 0;
}
