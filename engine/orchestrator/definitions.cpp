#include "engine/orchestrator/definitions.hpp"

#include <mutex>
#include <pqxx/pqxx>

#include "engine/engine.hpp"
#include "engine/repository/saga_store.hpp"

namespace sagaflow::detail {

void DefinitionRegistry::RefuseConflictLocked(const SagaDefinition& definition) const {
    for (const auto& [hash, known] : by_hash_) {
        if (known->name == definition.name && known->version == definition.version && hash != definition.hash) {
            throw EngineError("saga '" + definition.name + "' version " + std::to_string(definition.version) +
                              " is already registered with other content. Hint: bump `version:` in the changed "
                              "file; running sagas keep the version they started with");
        }
    }
}

void DefinitionRegistry::RefuseConflict(const SagaDefinition& definition) const {
    std::shared_lock lock(mutex_);
    RefuseConflictLocked(definition);
}

void DefinitionRegistry::Add(Pointer definition, std::string source) {
    std::unique_lock lock(mutex_);
    RefuseConflictLocked(*definition);  // another thread may have registered the same version meanwhile
    sources_[definition->hash] = std::move(source);
    auto& latest = latest_[definition->name];
    if (!latest || latest->version < definition->version) latest = definition;
    by_hash_[definition->hash] = std::move(definition);
}

DefinitionRegistry::Pointer DefinitionRegistry::Find(pqxx::transaction_base& tx,
                                                     const std::string& type,
                                                     const std::string& hash) {
    {
        std::shared_lock lock(mutex_);
        if (const auto it = by_hash_.find(hash); it != by_hash_.end()) return it->second;
    }
    auto definition = std::make_shared<const SagaDefinition>(ReadStoredDefinition(tx, type, hash));
    std::unique_lock lock(mutex_);
    return by_hash_.emplace(hash, std::move(definition)).first->second;
}

DefinitionRegistry::Pointer DefinitionRegistry::Latest(const std::string& type) const {
    std::shared_lock lock(mutex_);
    const auto it = latest_.find(type);
    return it == latest_.end() ? nullptr : it->second;
}

bool DefinitionRegistry::Knows(const std::string& type) const {
    std::shared_lock lock(mutex_);
    return latest_.count(type) != 0;
}

std::vector<std::pair<DefinitionRegistry::Pointer, std::string>> DefinitionRegistry::All() const {
    std::shared_lock lock(mutex_);
    std::vector<std::pair<Pointer, std::string>> out;
    for (const auto& [hash, source] : sources_) out.emplace_back(by_hash_.at(hash), source);
    return out;
}

}  // namespace sagaflow::detail
