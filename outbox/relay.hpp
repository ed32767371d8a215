#pragma once
// The outbox relay: publishes committed outbox rows to Kafka through one long-lived idempotent
// producer and marks them published.
//
// Lifecycle: Start() spawns the relay thread; it connects to PostgreSQL, takes the relay leader
// lock, LISTENs on `sagaflow_outbox` and loops: claim a batch (one statement, id order, no row
// locks and no open transaction: the leader lock makes the relay the only publisher), produce
// every row, wait for every delivery report, mark the delivered rows `published_at` and the failed
// ones `attempts`/`last_error`/`next_attempt_at` (one statement, or one transaction when some
// failed) — each row only if it is still the version the claim read: a row re-armed meanwhile
// keeps its new state and goes out again. While batches keep coming it claims again after each
// one; once a claim finds nothing it takes the wake lock, claims once more and sleeps until a
// NOTIFY or the poll interval. Only commits made while it holds the wake lock notify (the outbox
// trigger tries the lock shared), so a busy relay, and the other listening sessions of its
// database, are not woken at every commit; with a LocalWake, its own process's commits wake it in
// memory instead of notifying (outbox/local_wake.hpp). Its session commits without waiting for the
// WAL flush (synchronous_commit = off): it writes only marks, and a crash that loses the last of
// them publishes those rows again under the same ids. Stop() asks the thread to finish: in-flight deliveries get
// `drain_timeout`; what is not acknowledged by then stays unpublished and is published again later with the same event
// id (the consumers' inboxes drop the duplicate).
//
// Ordering: one relay publishes at a time (a session advisory lock; other relays stand by and take
// over within `poll_interval` when the leader's session ends). Rows go out in id order; a row that
// fails holds back the later rows of its key until it is published, so per-key order on the topic
// is the order of the rows' ids, which for one saga is commit order (a saga's writes are serialised
// by its row lock). Order across keys is not kept beyond what Kafka's partitions give.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "outbox/kafka.hpp"
#include "outbox/local_wake.hpp"
#include "outbox/metrics.hpp"

namespace sagaflow::outbox {

struct RelayOptions {
    std::string db_url;
    std::string brokers;
    KafkaProperties properties;  // passed to librdkafka (TLS, SASL, ...); idempotence stays on
    int batch_size = 500;
    std::chrono::milliseconds poll_interval{500};
    std::chrono::milliseconds drain_timeout{10'000};
    // A batch whose delivery reports stop coming for this long (none acknowledged, none failed) is
    // left unmarked and published again by a new producer, under the same event ids: librdkafka
    // waits for a broker indefinitely here (message.timeout.ms=0), and a producer that never
    // recovers from a broker restart would otherwise hold the relay's leader lock forever. A duplicate this may cause
    // carries the same id and bytes.
    std::chrono::milliseconds stall_timeout{30'000};
    std::chrono::milliseconds initial_backoff{500};
    std::chrono::milliseconds max_backoff{60'000};
    // The process's own writers wake this relay in memory (outbox/local_wake.hpp); null: only
    // notifications and the poll interval do.
    std::shared_ptr<LocalWake> local_wake;
};

// The relay producer's librdkafka properties: the user's, with enable.idempotence=true and acks=all
// enforced (KafkaError if the user set them otherwise).
KafkaProperties RelayProducerProperties(const RelayOptions& options);

// The statement a relay claims with, on the outbox of the session's schema: unpublished rows that
// are due and not held back behind an earlier row of their key, in id order, `LIMIT $1`; with
// `after_position` only ids above `$2`, else ids from `$2` (the low-water mark; 0: every row) and the
// rows listed in outbox_retry. Columns: id, event_id, topic, message_key, headers,
// payload, attempts, the snapshot's xmax, the row's xmin. Public so a diagnosis can ask exactly
// what the relay would take now.
std::string RelayClaimStatement(bool after_position);
// The relay's mark: `published_at` for the rows of ids `$1` (bigint[]) that are still the versions
// `$2` (xid[], the claim's xmin column) and unpublished, with partitions `$3` and offsets `$4`;
// returns the ids it marked. Public for its test.
std::string RelayMarkStatement();

class Relay {
  public:
    explicit Relay(RelayOptions options);
    ~Relay();
    Relay(const Relay&) = delete;
    Relay& operator=(const Relay&) = delete;

    void Start();
    void Stop();
    const RelayMetrics& Metrics() const noexcept { return metrics_; }
    bool IsLeader() const noexcept { return leader_.load(); }

  private:
    class Impl;
    RelayOptions options_;
    RelayMetrics metrics_;
    std::atomic<bool> stopping_{false};
    std::atomic<bool> leader_{false};
    std::thread thread_;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sagaflow::outbox
