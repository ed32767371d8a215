#pragma once
// What the orchestrator's services (SagaCommands, ReplyHandler, TimerService) share: the
// configuration, the registered definitions, the database pool while the engine runs, the
// counters, and the two halves of every saga transaction — Persist (write the machine's decision)
// inside it, Apply (counters, latencies, log lines, timer pokes) after its commit.

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <pqxx/transaction_base>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/orchestrator/definitions.hpp"
#include "engine/repository/saga_store.hpp"

namespace sagaflow::store {
class ConnectionPool;
}

namespace sagaflow::detail {

// What a transaction did that the world may learn only once it committed: counters, step
// latencies, log lines. Gathered while it runs and applied after its commit (Orchestration::Apply);
// a rolled-back transaction's are dropped with it, so a reply batch retried record by record
// counts and logs each reply once.
struct SideEffects {
    std::vector<std::pair<std::string, double>> latencies;
    std::uint64_t finished = 0, replies_applied = 0;
    std::vector<std::string> ignored;               // "reply ... ignored: ..." lines (logged at debug)
    std::vector<std::string> parked;                // "saga ... parked as failed: ..." lines
    std::optional<std::chrono::milliseconds> poke;  // the soonest timer the transaction set

    void Latencies(std::vector<std::pair<std::string, double>> more) {
        latencies.insert(latencies.end(), more.begin(), more.end());
    }
    void Poke(std::optional<std::chrono::milliseconds> delay) {
        if (delay && (!poke || *delay < *poke)) poke = delay;
    }
};

struct Counters {
    std::atomic<std::uint64_t> sagas_started{0}, replies_applied{0}, replies_ignored{0}, timers_fired{0},
        sagas_finished{0}, sagas_parked{0}, sagas_cancelled{0};
};

class Orchestration {
  public:
    // `config` outlives this (the engine's, with instance_id resolved); `poke` tells the timer
    // loop of a timer due within the delay.
    Orchestration(const EngineConfig& config, std::function<void(std::chrono::milliseconds)> poke);

    const EngineConfig& Config() const noexcept { return config_; }
    DefinitionRegistry& Definitions() noexcept { return definitions_; }
    Counters& Count() noexcept { return counters_; }

    // The pool while the engine runs; Pool() throws EngineError ("not started") otherwise.
    void Attach(store::ConnectionPool* pool) noexcept { pool_ = pool; }
    store::ConnectionPool& Pool() const;

    // Writes the decision; what it means for metrics and logs goes to `side`, for after the commit.
    // Without a transaction (null `tx`, `batch` required) it is only queued, for a statement that
    // will open one (a start); a decision that would write at once throws std::logic_error.
    Effects Persist(pqxx::transaction_base* tx,
                    const SagaDefinition& definition,
                    const LoadedSaga& saga,
                    const machine::Decision& decision,
                    SideEffects& side,
                    std::vector<TimelineRow> timeline = {},
                    WriteBatch* batch = nullptr);
    // After the commit of the transaction that gathered them.
    void Apply(SideEffects side);
    void RecordLatencies(const std::vector<std::pair<std::string, double>>& latencies);
    void Poke(std::optional<std::chrono::milliseconds> delay) const {
        if (delay) poke_(*delay);
    }
    std::map<std::string, StepLatency> Latencies() const;

    // The consumer group a participant's command consumer runs in (engine.participant_groups, or
    // sagaflow-participant-<name>).
    std::string ParticipantGroup(const std::string& participant) const;

  private:
    const EngineConfig& config_;
    std::function<void(std::chrono::milliseconds)> poke_;
    std::string source_;  // the CloudEvents source of the engine's commands
    DefinitionRegistry definitions_;
    Counters counters_;
    std::atomic<store::ConnectionPool*> pool_{nullptr};
    mutable std::mutex latency_mutex_;
    std::map<std::string, StepLatency> latency_;
    std::mutex rng_mutex_;
    std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace sagaflow::detail
