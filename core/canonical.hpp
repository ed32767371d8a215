#pragma once
// Canonical JSON (sorted keys, no insignificant whitespace) and its SHA-256, shared by the
// definition hash and the HTTP Idempotency-Key command hash.

#include <nlohmann/json.hpp>
#include <string>

#include "core/sha256.hpp"

namespace sagaflow::detail {

// nlohmann::json keeps object keys sorted, so a compact dump is canonical.
inline std::string CanonicalJson(const nlohmann::json& value) {
    return value.dump();
}

inline std::string CanonicalHash(const nlohmann::json& value) {
    return Sha256Hex(CanonicalJson(value));
}

}  // namespace sagaflow::detail
