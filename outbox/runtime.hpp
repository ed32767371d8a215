#pragma once
// The running parts the engine and a participant share: a database pool, an outbox relay and a
// consumer whose handler runs in the inbox transaction. Started in that order, stopped in reverse.

#include <memory>
#include <string>

#include "outbox/consumer.hpp"
#include "outbox/local_wake.hpp"
#include "outbox/relay.hpp"
#include "store/pool.hpp"
#include "store/sweeper.hpp"

namespace sagaflow::outbox {

struct Runtime {
    // The pool's commits wake the relay in memory (outbox/local_wake.hpp).
    std::shared_ptr<LocalWake> local_wake = std::make_shared<LocalWake>();
    std::unique_ptr<store::ConnectionPool> pool;
    std::unique_ptr<Relay> relay;
    std::unique_ptr<Consumer> consumer;
    std::unique_ptr<store::Sweeper> sweeper;

    // A pool whose connections have the inbox statements prepared and plan sagaflow's statements
    // as store::UseOwnStatementPlans says (a participant's handlers set the server's defaults back
    // for the user's SQL: store::kUserStatementPlans).
    void StartPool(const std::string& url, int size);
    void StartRelay(const std::string& url, const std::string& brokers, const KafkaProperties& properties);
    void StartConsumer(ConsumerOptions options, BatchHandler handler);
    // Deletes the pool's schema's inbox rows, idempotency records and published outbox rows past
    // `ttl` (24-72 h, rule R-DIST-IDEM-5): at once, then daily (store::SweepOnce).
    // `extra`: more work for each pass (the engine's saga history retention).
    void StartSweeper(std::chrono::hours ttl, store::Sweeper::Extra extra = {});
    // Stopping begins: the consumer takes no new batch, and nothing waits for the database any
    // more (a job waiting for a connection fails), so the joins below return while PostgreSQL is
    // down. Stop() calls it first; an owner with threads of its own that wait for pool jobs calls it
    // before joining them.
    void BeginStop();
    void Stop();
};

}  // namespace sagaflow::outbox
