#pragma once
// The saga definitions an engine knows: the ones registered with it (by hash, and the latest
// version of each type) and the ones read back from saga_definition when a saga is pinned to a
// version this process never registered. Thread-safe.

#include <map>
#include <memory>
#include <pqxx/transaction_base>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/definition.hpp"

namespace sagaflow::detail {

class DefinitionRegistry {
  public:
    using Pointer = std::shared_ptr<const SagaDefinition>;

    // Throws EngineError when the definition's name and version are known with other content.
    void RefuseConflict(const SagaDefinition& definition) const;
    // Registers it (checked again under the lock), with its YAML source.
    void Add(Pointer definition, std::string source);

    // The definition a saga is pinned to: registered here, or read back from saga_definition.
    Pointer Find(pqxx::transaction_base& tx, const std::string& type, const std::string& hash);
    // The latest registered version of a type, or null.
    Pointer Latest(const std::string& type) const;
    bool Knows(const std::string& type) const;
    // Every registered definition with its source, in hash order.
    std::vector<std::pair<Pointer, std::string>> All() const;

  private:
    void RefuseConflictLocked(const SagaDefinition& definition) const;

    mutable std::shared_mutex mutex_;
    std::map<std::string, Pointer> by_hash_;
    std::map<std::string, std::string> sources_;  // hash -> YAML, of the registered ones
    std::map<std::string, Pointer> latest_;       // type -> highest registered version
};

}  // namespace sagaflow::detail
