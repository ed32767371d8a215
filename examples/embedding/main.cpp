// The smallest service that embeds the sagaflow engine: register a saga, start the engine, start
// one saga with an idempotency key, wait for it to end, print its timeline.
//
//   sagaflow-embedding-example DB_URL BROKERS SAGA_FILE ORDER_ID
//
// The participants (e.g. examples/order-payment) answer the commands; without them the saga waits
// at its first step until its timeouts run out.
#include <chrono>
#include <iostream>
#include <thread>

#include "engine/engine.hpp"

int main(int argc, char** argv) {
    if (argc != 5) {
        std::cerr << "usage: " << argv[0] << " DB_URL BROKERS SAGA_FILE ORDER_ID\n";
        return 2;
    }
    sagaflow::EngineConfig config;
    config.database_url = argv[1];
    config.kafka_brokers = argv[2];
    sagaflow::Engine engine{config};
    try {
        engine.RegisterDefinitionFile(argv[3]);
        engine.Start();
    } catch (const std::exception& e) {
        std::cerr << "cannot start the engine: " << e.what() << "\n";
        return 1;
    }
    const std::string order_id = argv[4];
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
        std::cout << "  " << entry.at << "  " << entry.kind << " " << entry.step_name << " " << entry.phase << "\n";
    }
    std::cout << "status: " << saga->status << "\n";
    engine.Stop();
    return saga->Terminal() ? 0 : 1;
}
