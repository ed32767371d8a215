#include "engine/orchestrator/timer_loop.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <pqxx/connection>
#include <pqxx/except>

namespace sagaflow::detail {

namespace asio = boost::asio;

TimerLoop::TimerLoop(asio::io_context& io, std::chrono::milliseconds max_sleep, Scan scan)
    : io_(io), max_sleep_(max_sleep), scan_(std::move(scan)), timer_(io) {}

void TimerLoop::Start(store::ConnectionPool& pool) {
    pool_ = &pool;
    running_ = true;
    asio::post(io_, [this] { Arm(std::chrono::milliseconds(0)); });
}

void TimerLoop::Poke(std::chrono::milliseconds delay) {
    if (!running_.load()) return;
    // A timer that fires by then is enough: its scan starts after this commit and finds the new
    // timer. Without this check every reply batch woke the io thread, mostly to learn that.
    const auto when = std::chrono::steady_clock::now() + std::min(delay, max_sleep_);
    if (armed_until_.load() <= when.time_since_epoch().count()) return;
    asio::post(io_, [this, delay] { Arm(delay); });
}

void TimerLoop::Stop() {
    running_ = false;
    timer_.cancel();  // its handler, if the io_context runs again, sees operation_aborted
    armed_ = scanning_ = false;
    armed_until_ = kNotArmed;
    rescan_at_.reset();
    if (scan_done_.valid()) scan_done_.wait();  // the io thread is gone: nothing starts another scan
}

void TimerLoop::Arm(std::chrono::milliseconds delay) {
    const auto when = std::chrono::steady_clock::now() + std::min(delay, max_sleep_);
    if (scanning_) {
        rescan_at_ = std::min(rescan_at_.value_or(when), when);
        return;
    }
    if (armed_ && timer_.expiry() <= when) return;
    armed_ = true;
    timer_.expires_at(when);
    armed_until_ = when.time_since_epoch().count();
    timer_.async_wait([this](const boost::system::error_code& ec) {
        if (ec) return;  // cancelled: re-armed earlier, or stopping
        armed_ = false;
        armed_until_ = kNotArmed;  // before the scan starts: a poke from now on is posted
        Run();
    });
}

void TimerLoop::Run() {
    scanning_ = true;
    scan_done_ = pool_->Submit([this](pqxx::connection& conn) {
        // The job never throws: a pool runs a job whose connection broke again, and that rerun
        // would overlap the next scan (the loop already counts this one as ended). The pool
        // reconnects for its next job instead; the loop scans again at the next due time.
        std::chrono::milliseconds next = max_sleep_;
        try {
            next = scan_(conn, running_);
        } catch (const pqxx::broken_connection& e) {
            conn.disconnect();
            if (const auto unlogged = lost_.Due()) {
                spdlog::warn("timers: the scan's database connection was lost ({}); scanning again within {} ms{}",
                             e.what(),
                             max_sleep_.count(),
                             *unlogged == 0 ? "" : fmt::format(" ({} more since the last line)", *unlogged));
            }
        } catch (const std::exception&) {  // the scan logs its own failures
        }
        asio::post(io_, [this, next] {
            scanning_ = false;
            auto delay = next;
            if (rescan_at_) {
                const auto until = std::chrono::duration_cast<std::chrono::milliseconds>(
                    *rescan_at_ - std::chrono::steady_clock::now());
                delay = std::min(delay, std::max(until, std::chrono::milliseconds(0)));
                rescan_at_.reset();
            }
            Arm(delay);
        });
    });
}

}  // namespace sagaflow::detail
