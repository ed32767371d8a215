// Stopping while PostgreSQL is gone: a process that waits for the database (a consumer batch, a
// timer scan, a pool reconnecting with backoff) must still stop on SIGTERM, or a supervisor's
// restart, a deployment or a node drain hangs until it resorts to SIGKILL.
#include <doctest/doctest.h>
#include <signal.h>

#include <fstream>
#include <iostream>
#include <thread>

#include "tests/support/example_rig.hpp"
#include "tests/support/own_services.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow;
using testing::ExampleRig;
using testing::WaitFor;

TEST_CASE("SIGTERM stops the engine and both example services while PostgreSQL is down") {
    testing::OwnPostgres pg;
    ExampleRig rig{testing::KafkaBrokers(), pg.Url(), true};
    auto engine = rig.SpawnEngine("engine-1");
    auto order = rig.SpawnOrderService();
    auto payment = rig.SpawnPaymentService();
    {
        auto front = rig.FrontEnd();
        const auto start = [&](int from, int count) {
            for (int i = from; i < from + count; ++i) {
                const std::string id = "shutdown-" + std::to_string(i);
                REQUIRE(front->StartSaga("order-payment", ExampleRig::Input(id, "25.00"), id).Accepted());
            }
        };
        start(0, 20);
        REQUIRE(rig.WaitQuiet(std::chrono::seconds(90)));  // every part is up and working
        start(20, 40);                                     // and these are in flight when the database goes
    }
    REQUIRE(pg.Shutdown() == 0);
    // Consumers, relays, timer scans and the pools now wait for the database.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    REQUIRE(engine->Running());
    REQUIRE(order->Running());
    REQUIRE(payment->Running());

    const std::vector<std::pair<std::string, ExampleRig::Process*>> processes{
        {"engine", &engine}, {"order service", &order}, {"payment service", &payment}};
    for (const auto& [name, process] : processes) ::kill((*process)->Pid(), SIGTERM);
    for (const auto& [name, process] : processes) {
        const bool stopped = WaitFor([&] { return !(*process)->Running(); }, std::chrono::seconds(30));
        CHECK_MESSAGE(stopped, name << " did not stop within 30 s of SIGTERM with PostgreSQL down");
        if (!stopped) (*process)->KillAndWait(SIGKILL);
    }
}
