#pragma once
// What the HTTP API needs of the engine beyond the public API (internal: uses libpqxx types).

#include <functional>
#include <optional>
#include <pqxx/transaction_base>
#include <string>

#include "engine/engine.hpp"

namespace sagaflow::store {
class ConnectionPool;
}

namespace sagaflow::detail {

// Runs inside StartSaga's transaction with its outcome, before the commit, so the caller's writes
// (the HTTP idempotency record) commit together with the saga they describe.
using StartHook = std::function<void(pqxx::transaction_base& tx, const StartResult& result)>;

struct EngineInternals {
    static StartResult StartSaga(Engine& engine,
                                 const std::string& saga_type,
                                 nlohmann::json input,
                                 const std::string& idempotency_key,
                                 const StartHook& hook);
    static store::ConnectionPool& Pool(Engine& engine);
    // A saga type's definition is registered (for 404 before any database work).
    static bool KnowsType(Engine& engine, const std::string& saga_type);
    // Why StartSaga would refuse this start before any database work (unknown type, input errors);
    // nullopt if it would not.
    static std::optional<StartResult> Refusal(Engine& engine, const std::string& saga_type, nlohmann::json input);
};

}  // namespace sagaflow::detail
