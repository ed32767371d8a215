#pragma once
// Counters of the outbox relay and the consumers, read by /metrics. Plain atomics: written by the
// relay or consumer thread, read by anyone.

#include <atomic>
#include <cstdint>

namespace sagaflow::outbox {

struct RelayMetrics {
    std::atomic<std::uint64_t> published{0};       // rows acknowledged by the broker and marked
    std::atomic<std::uint64_t> retried{0};         // rows whose produce failed and were scheduled again
    std::atomic<std::uint64_t> failed_batches{0};  // batches left unmarked (fatal producer error, stall, shutdown)
    std::atomic<std::uint64_t> producer_restarts{0};
};

struct ConsumerMetrics {
    std::atomic<std::uint64_t> consumed{0};       // records read from Kafka
    std::atomic<std::uint64_t> applied{0};        // first deliveries handed to the handler
    std::atomic<std::uint64_t> duplicates{0};     // dropped by the inbox
    std::atomic<std::uint64_t> dead_lettered{0};  // moved to <topic>.dlq
    std::atomic<std::int64_t> lag{0};             // records behind the high watermark, all partitions
    std::atomic<std::uint64_t> restarts{0};       // Kafka consumers replaced after a fatal error
    std::atomic<std::int64_t> assigned{0};        // partitions this member holds now
    std::atomic<std::uint64_t> rebalances{0};     // assignments and revocations it took part in
    // Batches put back because the database could not take them (out of disk, restarting,
    // read-only): read again later, never dead-lettered.
    std::atomic<std::uint64_t> database_stalls{0};
};

}  // namespace sagaflow::outbox
