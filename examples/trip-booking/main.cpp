// sagaflow-trip-services: the five participants of sagas/trip-booking.yaml in one process.
#include <atomic>
#include <csignal>
#include <iostream>
#include <thread>

#include "examples/order-payment/service.hpp"
#include "examples/trip-booking/trip_participants.hpp"

int main(int argc, char** argv) {
    CLI::App app{"sagaflow example: the trip-booking saga's participants (hotel, airline, payment, insurance, notify)"};
    example::LogToStderr();
    example::ServiceFlags flags;
    example::AddServiceFlags(app, flags, "hotel", "trip_hotel");
    int slow_ms = 3000;
    app.add_option("--slow-ms", slow_ms, "how long a \"slow-\" hotel or \"SLOW\" flight is held before its answer")
        ->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    auto base = example::ConfigFrom(app, flags);
    base.name.clear();  // each participant is named after its role, as in sagas/trip-booking.yaml
    std::vector<std::unique_ptr<sagaflow::Participant>> running;
    for (const auto& name : trip::kParticipants) {
        running.push_back(trip::Make(name, base, std::chrono::milliseconds(slow_ms)));
        try {
            running.back()->Start();
        } catch (const std::exception& e) {
            std::cerr << name << ": cannot start: " << e.what() << std::endl;
            return 1;
        }
    }
    std::signal(SIGINT, [](int) { example::g_stop = true; });
    std::signal(SIGTERM, [](int) { example::g_stop = true; });
    std::cerr << "trip services: running" << std::endl;
    while (!example::g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (auto& p : running) p->Stop();
    return 0;
}
