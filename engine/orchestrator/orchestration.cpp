#include "engine/orchestrator/orchestration.hpp"
#include "core/text_scan.hpp"

#include <spdlog/spdlog.h>

namespace sagaflow::detail {

Orchestration::Orchestration(const EngineConfig& config, std::function<void(std::chrono::milliseconds)> poke)
    : config_(config), poke_(std::move(poke)), source_("sagaflow/" + config.instance_id) {}

store::ConnectionPool& Orchestration::Pool() const {
    auto* pool = pool_.load();
    if (pool == nullptr) throw EngineError("the engine is not started. Hint: call Engine::Start() first");
    return *pool;
}

Effects Orchestration::Persist(pqxx::transaction_base* tx,
                               const SagaDefinition& definition,
                               const LoadedSaga& saga,
                               const machine::Decision& decision,
                               SideEffects& side,
                               std::vector<TimelineRow> timeline,
                               WriteBatch* batch) {
    Effects effects;
    {
        std::lock_guard lock(rng_mutex_);
        effects = detail::Persist(tx, definition, saga, decision, source_, rng_, std::move(timeline), batch);
    }
    side.Latencies(effects.step_latencies);
    if (effects.finished) ++side.finished;
    if (effects.parked) {
        side.parked.push_back(fmt::format(
            "saga {} ({}) parked as failed: {}", saga.saga_id, saga.saga_type, decision.state.parked_reason));
    }
    return effects;
}

void Orchestration::Apply(SideEffects side) {
    RecordLatencies(side.latencies);
    counters_.sagas_finished += side.finished;
    counters_.replies_applied += side.replies_applied;
    counters_.replies_ignored += side.ignored.size();
    for (const auto& line : side.ignored) spdlog::debug("{}", text::EscapeControl(line));
    counters_.sagas_parked += side.parked.size();
    for (const auto& line : side.parked) spdlog::error("{}", text::EscapeControl(line));
    Poke(side.poke);
}

void Orchestration::RecordLatencies(const std::vector<std::pair<std::string, double>>& latencies) {
    if (latencies.empty()) return;
    std::lock_guard lock(latency_mutex_);
    for (const auto& [step, seconds] : latencies) {
        auto& h = latency_[step];
        for (std::size_t b = 0; b < StepLatency::kBuckets.size(); ++b) {
            if (seconds <= StepLatency::kBuckets[b]) ++h.counts[b];
        }
        ++h.count;
        h.sum += seconds;
    }
}

std::map<std::string, StepLatency> Orchestration::Latencies() const {
    std::lock_guard lock(latency_mutex_);
    return latency_;
}

std::string Orchestration::ParticipantGroup(const std::string& participant) const {
    const auto it = config_.participant_groups.find(participant);
    return it != config_.participant_groups.end() ? it->second : "sagaflow-participant-" + participant;
}

}  // namespace sagaflow::detail
