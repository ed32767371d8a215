#pragma once
// The engine's durable-timer loop: one scan of the due timers at a time, on a pool connection,
// woken by a steady_timer on the io thread at the next due time (at most `max_sleep` away) or
// earlier by Poke() after a commit that set a sooner timer (a poke the armed timer already covers
// does not wake the io thread). A poke during a scan is remembered and applied when the scan ends,
// so no two scans ever run at once.
//
// Lifecycle: Start(pool) (the io_context runs) -> Poke() from any thread (ignored unless started)
// -> Stop(): call it after the io thread has ended; it waits for the scan in flight. Start again
// after Stop is fine.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <limits>
#include <optional>

#include "store/errors.hpp"
#include "store/pool.hpp"

namespace sagaflow::detail {

class TimerLoop {
  public:
    // Fires what is due and returns the time until the next timer. Runs on a pool thread; stops
    // early, between timers, once `running` is false (Stop waits for it).
    using Scan = std::function<std::chrono::milliseconds(pqxx::connection&, const std::atomic<bool>& running)>;

    TimerLoop(boost::asio::io_context& io, std::chrono::milliseconds max_sleep, Scan scan);
    TimerLoop(const TimerLoop&) = delete;
    TimerLoop& operator=(const TimerLoop&) = delete;

    void Start(store::ConnectionPool& pool);
    void Poke(std::chrono::milliseconds delay);  // any thread: scan within `delay` (if running)
    void Stop();

  private:
    void Arm(std::chrono::milliseconds delay);  // io thread
    void Run();                                 // io thread: hands a scan to the pool

    boost::asio::io_context& io_;
    store::ConnectionPool* pool_ = nullptr;  // set by Start
    std::chrono::milliseconds max_sleep_;
    Scan scan_;
    boost::asio::steady_timer timer_;
    std::atomic<bool> running_{false};
    // The armed timer's expiry (steady_clock ticks), kNotArmed while none is armed or a scan runs:
    // a Poke() for a later time skips the io thread.
    static constexpr std::chrono::steady_clock::rep kNotArmed =
        std::numeric_limits<std::chrono::steady_clock::rep>::max();
    std::atomic<std::chrono::steady_clock::rep> armed_until_{kNotArmed};
    bool armed_ = false;                                              // io thread
    bool scanning_ = false;                                           // io thread
    std::optional<std::chrono::steady_clock::time_point> rescan_at_;  // io thread: a poke during the scan
    store::FailureLogLimit lost_;                                     // pool thread, one scan at a time
    std::future<void> scan_done_;  // written on the io thread; waited for in Stop after it ended
};

}  // namespace sagaflow::detail
