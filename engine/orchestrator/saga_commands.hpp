#pragma once
// Start, read, list, retry and cancel sagas: the one service behind both the embedding API
// (Engine) and the HTTP API. Every method runs its own transaction on the engine's pool, except
// StartIn/CancelLocked, which work inside the caller's (the HTTP start commits its idempotency
// record with the saga; a saga's deadline cancels it in the timer's transaction).

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <pqxx/transaction>
#include <string>

#include "core/saga_id.hpp"
#include "engine/engine.hpp"
#include "engine/orchestrator/orchestration.hpp"

namespace sagaflow::detail {

// What a start leaves to do once its transaction has committed.
struct PendingStart {
    std::optional<std::chrono::milliseconds> next_timer;  // the first step's deadline, for the timer scan
};

class SagaCommands {
  public:
    explicit SagaCommands(Orchestration& sagas) : sagas_(sagas) {}

    StartResult Start(const std::string& type, nlohmann::json input, const std::string& key, const TraceContext& trace);
    // Why Start would refuse before any database work (unknown type, input errors); nullopt if it
    // would not, with `definition` set to the type's latest version and `input` holding its defaults.
    std::optional<StartResult> Refusal(const std::string& type,
                                       nlohmann::json& input,
                                       std::shared_ptr<const SagaDefinition>& definition) const;
    // A start's database work inside the caller's transaction (after Refusal passed); once it has
    // committed, the caller calls Committed.
    StartResult StartIn(pqxx::transaction_base& tx,
                        const SagaDefinition& definition,
                        const std::string& type,
                        const nlohmann::json& input,
                        const std::string& key,
                        const TraceContext& trace,
                        PendingStart& pending);
    void Committed(const StartResult& result, const PendingStart& pending);
    bool Knows(const std::string& type) const { return sagas_.Definitions().Knows(type); }

    // Saga ids are parsed where they enter (Engine, HTTP): a text that is no UUID names no saga.
    std::optional<SagaView> Get(const SagaId& saga_id);
    // nullopt also when `may_read` (if given) refuses the saga: one read decides both.
    std::optional<std::string> Graph(const SagaId& saga_id,
                                     GraphFormat format,
                                     const std::function<bool(const SagaView&)>& may_read = {});
    SagaPage List(const ListQuery& query);
    SagaOverview Overview();
    EngineGauges Gauges();
    RetryResult Retry(const SagaId& saga_id);
    CancelResult Cancel(const SagaId& saga_id, const std::string& reason);
    // The answer to a retry or cancel of a saga that does not exist.
    template <typename Result>
    static Result NoSaga(const std::string& saga_id) {
        Result none;
        none.status = Result::Status::kNotFound;
        none.message = "no saga " + saga_id;
        return none;
    }

    // Cancels a locked saga for `reason` (the caller commits): the decision is persisted with its
    // `cancelled` timeline entry, or nothing is written and `refused` says why the machine refused.
    struct Cancellation {
        std::string refused;
        machine::SagaStatus status = machine::SagaStatus::kRunning;  // after the decision
        std::string step;                                            // the step that was in flight
        Effects effects;
        SideEffects side;  // applied once the caller committed
    };
    Cancellation CancelLocked(pqxx::work& tx,
                              const SagaDefinition& definition,
                              const LoadedSaga& saga,
                              const std::string& reason);
    // After a cancellation committed.
    void Cancelled(const std::string& saga_id, const std::string& reason);

    store::ConnectionPool& Pool() const { return sagas_.Pool(); }

  private:
    void RequireStarted() const { static_cast<void>(sagas_.Pool()); }
    // A start's writes as one statement, planned before its transaction opens.
    struct PlannedStart {
        std::string saga_id;
        store::Statement statement;
    };
    PlannedStart PlanStart(const SagaDefinition& definition,
                           const std::string& type,
                           const nlohmann::json& input,
                           const std::string& key,
                           const TraceContext& trace,
                           PendingStart& pending);
    StartResult RunStart(const PlannedStart& planned,
                         const std::string& type,
                         const nlohmann::json& input,
                         const std::string& key);
    StartResult Outcome(pqxx::transaction_base& tx,
                        bool started,
                        const PlannedStart& planned,
                        const std::string& type,
                        const nlohmann::json& input,
                        const std::string& key);
    // An operator's action on one saga: `act` runs under the saga's row lock in a transaction it
    // commits; Result::Status::kNotFound when there is no saga of that id.
    template <typename Result, typename Act>
    Result OnLockedSaga(const SagaId& saga_id, Act act);

    Orchestration& sagas_;
};

}  // namespace sagaflow::detail
