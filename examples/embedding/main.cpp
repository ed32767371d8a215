// The smallest service that embeds the sagaflow engine: register a saga, start the engine, start
// one saga with an idempotency key, wait for it to end, print its timeline.
//
//   sagaflow-embedding-example DB_URL BROKERS SAGA_FILE ORDER_ID
//   sagaflow-embedding-example --config FILE ORDER_ID   # db, kafka, engine.sagas from the file
//
// The participants (e.g. examples/order-payment) answer the commands; without them the saga waits
// at its first step until its timeouts run out.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "engine/engine.hpp"

int main(int argc, char** argv) {
    const bool from_file = argc == 4 && std::string(argv[1]) == "--config";
    if (argc != 5 && !from_file) {
        std::cerr << "usage: " << argv[0] << " DB_URL BROKERS SAGA_FILE ORDER_ID\n"
                  << "       " << argv[0] << " --config FILE ORDER_ID\n";
        return 2;
    }
    sagaflow::EngineConfig config;
    std::vector<std::filesystem::path> sagas;
    if (from_file) {
        try {
            // The file with the SAGAFLOW_* environment variables applied; every problem at once.
            const auto file = sagaflow::Config::FromFile(argv[2]);
            config = file.engine;
            sagas = file.sagas;
        } catch (const sagaflow::ConfigError& e) {
            std::cerr << e.what();
            return 1;
        }
    } else {
        config.database_url = argv[1];
        config.kafka_brokers = argv[2];
        sagas.emplace_back(argv[3]);
    }
    sagaflow::Engine engine{config};
    try {
        for (const auto& file : sagas) engine.RegisterDefinitionFile(file);
        engine.Start();
    } catch (const std::exception& e) {
        std::cerr << "cannot start the engine: " << e.what() << "\n";
        return 1;
    }
    const std::string order_id = argv[argc - 1];
    const nlohmann::json input{{"orderId", order_id}, {"customerId", 7}, {"amount", "49.90"}};
    // The key makes a retry of this program safe: the same order starts the same saga.
    const auto started = engine.StartSaga("order-payment", input, "embedding-example-" + order_id);
    if (!started.Accepted()) {
        std::cerr << started.message << "\n";
        return 1;
    }
    std::cout << "saga " << started.saga_id
              << (started.status == sagaflow::StartResult::Status::kReplayed ? " (already started)" : "") << "\n";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    std::optional<sagaflow::SagaView> saga;
    while ((!(saga = engine.GetSaga(started.saga_id)) || !saga->Terminal()) &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (const auto& entry : saga->timeline) {
        std::cout << "  " << entry.at << "  " << entry.kind << " " << entry.step_name;
        if (entry.phase) std::cout << " " << *entry.phase;
        std::cout << "\n";
    }
    std::cout << "status: " << saga->status << "\n";
    engine.Stop();
    return saga->Terminal() ? 0 : 1;
}
