#pragma once
// Two counters' increase per minute, from samples taken when asked (the console's overview polls):
// over the last minute, or over what has been sampled once that spans 10 s. Thread-safe.

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace sagaflow::detail {

class RateWindow {
  public:
    using Clock = std::chrono::steady_clock;
    using Rates = std::pair<std::optional<double>, std::optional<double>>;

    // Keeps a sample of (a, b) at `now` (at most one per 5 s) and answers their increase per minute
    // since the newest sample at least a minute old (or the oldest one); nullopt before samples
    // span 10 s.
    Rates Sample(Clock::time_point now, std::uint64_t a, std::uint64_t b) {
        std::lock_guard lock(mutex_);
        if (samples_.empty() || now - samples_.back().at >= std::chrono::seconds(5)) samples_.push_back({now, a, b});
        while (samples_.size() > 1 && now - samples_[1].at >= std::chrono::minutes(1)) samples_.pop_front();
        const Point& from = samples_.front();
        const double seconds = std::chrono::duration<double>(now - from.at).count();
        if (seconds < 10) return {};
        const auto per_minute = [&](std::uint64_t to, std::uint64_t was) {
            return static_cast<double>(to >= was ? to - was : 0) * 60.0 / seconds;
        };
        return {per_minute(a, from.a), per_minute(b, from.b)};
    }

  private:
    struct Point {
        Clock::time_point at;
        std::uint64_t a = 0, b = 0;
    };
    std::mutex mutex_;
    std::deque<Point> samples_;  // oldest first; only the first may be over a minute old
};

}  // namespace sagaflow::detail
