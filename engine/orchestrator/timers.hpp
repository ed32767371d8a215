#pragma once
// The durable timers' work, one scan at a time (TimerLoop calls Scan): a step's deadline or
// backoff, or a saga's own deadline, fired under the saga's row lock. A step deadline waits
// (HoldTimeout) while its participant's group has not read the command, or the engine's group has
// not read the replies written before it — the two clocks of engine/README.md.

#include <atomic>
#include <chrono>
#include <pqxx/connection>
#include <pqxx/transaction>

#include "engine/orchestrator/orchestration.hpp"
#include "engine/orchestrator/saga_commands.hpp"
#include "outbox/group_progress.hpp"
#include "store/errors.hpp"

namespace sagaflow::detail {

class TimerService {
  public:
    TimerService(Orchestration& sagas, SagaCommands& commands) : sagas_(sagas), commands_(commands) {}

    // The groups' progress while the engine runs (null: timeouts count from dispatch).
    void Follow(outbox::GroupProgress* progress) noexcept { progress_ = progress; }

    // Fires every due timer, each in a transaction of its own under the saga's row lock (skipping
    // a saga another engine is working on: its timer stays due and is seen by the next scan).
    // Returns the time until the next one. A broken connection is thrown; other failures are
    // logged (rate-limited) and the next scan comes after timer_max_sleep. Returns between two
    // timers once `running` is false: a backlog of due timers must not hold up the engine's Stop
    // (each timer commits on its own; the rest stay due for the next scan, here or elsewhere).
    std::chrono::milliseconds Scan(pqxx::connection& conn, const std::atomic<bool>& running);

  private:
    bool Fire(pqxx::connection& conn, const DueTimer& timer);
    bool HoldTimeout(pqxx::work& tx, const SagaDefinition& definition, const LoadedSaga& saga, const DueTimer& timer);
    bool FireDeadline(pqxx::work& tx, const SagaDefinition& definition, const LoadedSaga& saga);

    Orchestration& sagas_;
    SagaCommands& commands_;
    std::atomic<outbox::GroupProgress*> progress_{nullptr};
    store::FailureLogLimit timer_failures_;    // the scan's, while the database is away
    store::FailureLogLimit unknown_progress_;  // groups whose progress Kafka cannot tell
};

}  // namespace sagaflow::detail
