#pragma once
// UUID version 7 (RFC 9562): 48-bit Unix milliseconds, then a 12-bit counter that keeps ids
// monotonic within one millisecond (method 1, "fixed-length dedicated counter"), then 62 random
// bits. Time-ordered ids insert at the right edge of a B-tree and sort by creation time.
// PostgreSQL 15 has no generator, so sagaflow mints them.

#include <cstdint>
#include <mutex>
#include <random>
#include <string>

namespace sagaflow::outbox {

// A new UUID v7 in canonical text form; thread-safe, strictly increasing within this process.
std::string NewUuidV7();

// The generator behind NewUuidV7, with the clock passed in so tests can drive it.
class UuidV7Generator {
  public:
    UuidV7Generator();
    std::string Next(std::uint64_t unix_ms);

  private:
    std::mutex mutex_;
    std::mt19937_64 rng_;
    std::uint64_t last_ms_ = 0;
    std::uint32_t counter_ = 0;
};

}  // namespace sagaflow::outbox
