#pragma once
// Deletes inbox rows, HTTP idempotency records and published outbox rows past their TTL (rule
// R-DIST-IDEM-5), in small batches, each its own short transaction, so no long lock ever blocks
// the hot path.
//
// Lifecycle: Start() runs a sweep at once and then every `interval` on its own thread, using the
// pool's connections; Stop() (or the destructor) wakes and joins it. SweepNowBlocking() sweeps
// on the caller's thread (`sagaflow sweep`).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "store/pool.hpp"

namespace sagaflow::store {

// The TTL must lie in 24..72 hours: shorter and a client's real retry (an hour after a network
// failure) is no longer deduplicated; longer and the tables grow for nothing. Throws
// std::invalid_argument naming the rule otherwise (the caller prefixes the setting's name).
inline constexpr std::chrono::hours kMinTtl{24};
inline constexpr std::chrono::hours kMaxTtl{72};
std::chrono::hours ValidateTtl(std::chrono::hours ttl);

struct SweepReport {
    long long processed_events = 0;
    long long idempotency_records = 0;
    long long outbox_rows = 0;  // published, and not the command of a step phase open or ended within the TTL
};

// "deleted N processed_event, ... rows older than T h": what `sagaflow sweep` prints and the
// sweeper logs.
std::string Describe(const SweepReport& report, std::chrono::hours ttl);

// One pass over the three tables on `conn` (its schema's).
SweepReport SweepOnce(pqxx::connection& conn, std::chrono::hours ttl, int batch_size = 1000);

class Sweeper {
  public:
    // More work for each pass, after the TTL sweep, on the same connection (the engine's saga
    // history retention); returns what it did, for the log line.
    using Extra = std::function<std::string(pqxx::connection&)>;

    Sweeper(ConnectionPool& pool,
            std::chrono::hours ttl,
            std::chrono::milliseconds interval = std::chrono::hours(24),
            Extra extra = {});
    ~Sweeper();
    Sweeper(const Sweeper&) = delete;
    Sweeper& operator=(const Sweeper&) = delete;

    void Start();
    void Stop();
    SweepReport SweepNowBlocking();

  private:
    ConnectionPool& pool_;
    std::chrono::hours ttl_;
    std::chrono::milliseconds interval_;
    Extra extra_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace sagaflow::store
