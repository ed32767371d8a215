// The engine's durable-timer loop on a real pool and PostgreSQL: one scan at a time, whatever
// happens to a scan's connection.
#include <doctest/doctest.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <pqxx/pqxx>
#include <thread>

#include "engine/orchestrator/timer_loop.hpp"
#include "store/pool.hpp"
#include "tests/support/services.hpp"

using namespace std::chrono_literals;
using sagaflow::testing::ScratchDatabase;

TEST_CASE("timer scans never overlap: a scan whose connection breaks is not run again beside the next one") {
    ScratchDatabase db;
    sagaflow::store::ConnectionPool pool{
        {.url = db.Url(), .size = 2, .on_connect = {}, .on_disconnect = {}, .after_job = {}}};
    boost::asio::io_context io;
    auto work = boost::asio::make_work_guard(io);
    std::thread io_thread([&] { io.run(); });

    std::atomic<int> calls{0}, in_flight{0}, most{0};
    sagaflow::detail::TimerLoop timers{
        io, 1000ms, [&](pqxx::connection& conn, const std::atomic<bool>&) {
            const int call = ++calls;
            const int now = ++in_flight;
            for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
            }
            struct Leave {
                std::atomic<int>& in_flight;
                ~Leave() { --in_flight; }
            } leave{in_flight};
            if (call == 1) {
                // The connection is killed from outside in the middle of the scan.
                const auto pid = pqxx::nontransaction{conn}.exec1("SELECT pg_backend_pid()")[0].as<int>();
                pqxx::connection admin{db.Url()};
                pqxx::nontransaction{admin}.exec("SELECT pg_terminate_backend(" + std::to_string(pid) + ")");
                pqxx::nontransaction{conn}.exec("SELECT 1");  // throws: the connection is gone
            }
            std::this_thread::sleep_for(300ms);  // a long scan
            return std::chrono::milliseconds(10s);
        }};
    timers.Start(pool);
    // Pokes (commits that set a sooner timer) arrive all the while, during scans too.
    for (int i = 0; i < 100; ++i) {
        timers.Poke(0ms);
        std::this_thread::sleep_for(20ms);
    }
    work.reset();
    io.stop();
    io_thread.join();
    timers.Stop();
    pool.Stop();
    MESSAGE("scans: " << calls.load() << ", most at once: " << most.load());
    CHECK(calls.load() >= 3);  // scanning went on after the broken one, poked
    CHECK(most.load() == 1);
}

TEST_CASE("a poke the armed timer already covers does not wake the io thread; a sooner one re-arms it") {
    ScratchDatabase db;
    sagaflow::store::ConnectionPool pool{
        {.url = db.Url(), .size = 1, .on_connect = {}, .on_disconnect = {}, .after_job = {}}};
    boost::asio::io_context io;  // run by this thread, so what each poke posts can be counted
    auto work = boost::asio::make_work_guard(io);
    std::atomic<int> scans{0};
    sagaflow::detail::TimerLoop timers{io, 10s, [&](pqxx::connection&, const std::atomic<bool>&) {
                                           ++scans;
                                           return std::chrono::milliseconds(5s);  // the next timer
                                       }};
    timers.Start(pool);
    io.run_for(300ms);  // the first scan, then armed 5 s ahead
    REQUIRE(scans == 1);

    for (int i = 0; i < 100; ++i) timers.Poke(8s);  // commits that set timers after the armed one
    CHECK(io.poll() == 0);                          // nothing was posted

    const auto poked = std::chrono::steady_clock::now();
    timers.Poke(500ms);  // a sooner one
    CHECK(io.poll() >= 1);
    while (scans == 1 && std::chrono::steady_clock::now() - poked < 3s) io.run_for(50ms);
    CHECK(scans == 2);
    CHECK(std::chrono::steady_clock::now() - poked < 2s);  // at the poke's time, not the 5 s timer's
    timers.Stop();
    pool.Stop();
}
