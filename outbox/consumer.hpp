#pragma once
// The consumer shared by the orchestrator (replies) and the participants (commands).
//
// Lifecycle: Start() spawns the consumer thread: subscribe, then loop: poll a batch, move malformed
// records to `<topic>.dlq` (reason in a header), run the well-formed ones through the inbox and
// the handler in ONE database transaction, commit it, and only then commit the Kafka offsets. A
// crash anywhere before the offset commit redelivers the batch; the inbox drops what was applied.
// If the batch transaction fails, each record is retried in a transaction of its own, and one whose
// handler keeps failing (`max_handler_attempts`) goes to the DLQ too, so a poison message never
// stops the consumer. Stop() finishes the current batch, closes the consumer (leaving the group)
// and joins.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <pqxx/result>
#include <pqxx/transaction>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "outbox/event.hpp"
#include "outbox/kafka.hpp"
#include "outbox/metrics.hpp"
#include "store/transaction.hpp"

namespace sagaflow::store {
class ConnectionPool;
}

namespace sagaflow::outbox {

struct InboundEvent {
    std::string topic;
    std::int32_t partition = 0;
    std::int64_t offset = 0;
    std::string key;
    CloudEvent event;
};

// Runs inside the inbox transaction: its writes, the inbox record and any outbox rows it enqueues
// commit together. Throwing rolls all of them back.
using EventHandler = std::function<void(pqxx::transaction_base& tx, const InboundEvent& event)>;
// The same for several events at once, in their order on the topic: a handler that reads per event
// can read for all of them with one statement (the engine loads a batch's sagas with one).
// `companion`: the rows of ConsumerOptions::companion, read with the inbox's statement, each with
// one more column at the end (the consumer's); nullptr when it did not run for this call, and the
// handler reads (or locks) for itself.
// It may return its last write instead of running it: the consumer runs it before anything else
// the transaction does after the call, and when nothing does, with the COMMIT in the same round
// trip (store::Transaction::Commit). Its rows are not read. nullopt: none.
using LastWrite = std::optional<store::Statement>;
using BatchHandler = std::function<LastWrite(
    pqxx::transaction_base& tx, const std::vector<const InboundEvent*>& events, const pqxx::result* companion)>;

// A statement of the handler's that the consumer runs inside its inbox statement: a SELECT whose
// parameters `$1`, `$2`, ... are `arguments`, in their text form. `settings`, optional: `set_config(name, value, true)`
// calls, comma-separated, that the statement evaluates once, so they hold for the rest of the transaction (SET LOCAL
// without a round trip of its own; store::InboxFreshIdsWith).
struct InboxCompanion {
    std::string sql;
    std::vector<std::string> arguments;
    std::string settings;
};

// Thrown by a BatchHandler from the transaction's first call, the one given the companion's rows,
// to have the batch applied once more: the transaction rolls back, and a new one applies the same
// records without the companion (every call gets nullptr). What the first call relied on the
// companion for — no savepoint of its own before it wrote, say — the second attempt does not. A
// second throw is a failure of the batch like any other (record by record follows).
struct ApplyBatchAgain : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct ConsumerOptions {
    std::string brokers;
    std::string group_id;
    std::vector<std::string> topics;
    std::string inbox_name;  // processed_event.consumer_name
    KafkaProperties properties;
    int batch_size = 200;
    std::chrono::milliseconds batch_wait{20};  // at most this long filling a batch from records already there
    int max_handler_attempts = 5;
    // Records are read within these (core/bounded_json.hpp); beyond them, dead-lettered unread.
    JsonLimits json_limits;
    // Static membership under a stable id (outbox/membership.hpp): unless `properties` name a
    // group.instance.id, one is derived per host and slot. False: a dynamic member.
    bool static_membership = true;
    // Called, inside the transaction, for a delivery the inbox dropped as a duplicate: a participant
    // answers a resent command with its stored reply again. Optional.
    EventHandler on_duplicate;
    // Around each database transaction of the handler: `on_transaction_begin` before the handler
    // runs in it, `after_commit` once it committed (never after a rollback). A handler's side
    // effects — metrics, log lines, timer pokes — belong after the commit: a batch that fails and
    // is applied again record by record then has them once. Optional; called on the consumer's
    // thread, one transaction at a time.
    std::function<void()> on_transaction_begin;
    std::function<void()> after_commit;
    // Optional: given a batch's well-formed events (duplicates included), the statement its handler
    // needs first (rows to read, locks to take), or nullopt. It rides with the inbox's statement, in
    // its snapshot: one round trip fewer per batch. Its rows reach the handler only when it is the
    // transaction's first call: a call after another (a duplicate answered first, an earlier run)
    // or record by record after a failed batch gets nullptr and reads for itself, since the calls
    // before may have written what the companion read.
    std::function<std::optional<InboxCompanion>(const std::vector<const InboundEvent*>& events)> companion;
};

// Its transactions run on its own thread, on a connection of the pool's kind on top of the pool's
// size (store::OwnConnection).
class Consumer {
  public:
    Consumer(store::ConnectionPool& pool, ConsumerOptions options, EventHandler handler);
    Consumer(store::ConnectionPool& pool, ConsumerOptions options, BatchHandler handler);
    ~Consumer();
    Consumer(const Consumer&) = delete;
    Consumer& operator=(const Consumer&) = delete;

    void Start();
    // Takes no new batch; a batch in progress is not applied if the database is gone (it is read
    // again after the restart). Stop() calls it and joins.
    void BeginStop() { stopping_ = true; }
    void Stop();
    const ConsumerMetrics& Metrics() const noexcept { return metrics_; }

  private:
    class Impl;
    ConsumerMetrics metrics_;
    std::atomic<bool> stopping_{false};
    std::unique_ptr<Impl> impl_;
    std::thread thread_;
};

}  // namespace sagaflow::outbox
