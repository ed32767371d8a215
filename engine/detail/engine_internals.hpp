#pragma once
// What the HTTP API needs of the engine beyond the public API (internal: uses libpqxx types).

#include <chrono>
#include <memory>
#include <optional>
#include <pqxx/transaction>
#include <string>

#include "engine/engine.hpp"

namespace sagaflow::store {
class ConnectionPool;
}

namespace sagaflow::detail {

// What a start leaves to do once its transaction has committed.
struct PendingStart {
    std::optional<std::chrono::milliseconds> next_timer;  // the first step's deadline, for the timer scan
};

struct EngineInternals {
    // StartSaga's work inside the caller's transaction, so the caller's writes (the HTTP
    // idempotency record) commit together with the saga they describe, in one commit: with the
    // definition and input a Refusal check passed (no second validation). After committing, the
    // caller calls Committed.
    static StartResult StartIn(Engine& engine,
                               pqxx::work& tx,
                               const SagaDefinition& definition,
                               const std::string& saga_type,
                               const nlohmann::json& input,
                               const std::string& idempotency_key,
                               const TraceContext& trace,
                               PendingStart& pending);
    static void Committed(Engine& engine, const StartResult& result, const PendingStart& pending);
    static store::ConnectionPool& Pool(Engine& engine);
    // A saga type's definition is registered (for 404 before any database work).
    static bool KnowsType(Engine& engine, const std::string& saga_type);
    // Why StartSaga would refuse this start before any database work (unknown type, input errors);
    // nullopt if it would not, with `definition` set and `input` holding its defaults.
    static std::optional<StartResult> Refusal(Engine& engine,
                                              const std::string& saga_type,
                                              nlohmann::json& input,
                                              std::shared_ptr<const SagaDefinition>& definition);
};

}  // namespace sagaflow::detail
