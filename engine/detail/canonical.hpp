#pragma once
// Canonical JSON (sorted keys, no insignificant whitespace) and SHA-256, shared by the definition
// hash and the HTTP Idempotency-Key command hash.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace sagaflow::detail {

// nlohmann::json keeps object keys sorted, so a compact dump is canonical.
inline std::string CanonicalJson(const nlohmann::json& value) {
    return value.dump();
}

// Lowercase hex SHA-256 of `data` (OpenSSL EVP).
std::string Sha256Hex(std::string_view data);

}  // namespace sagaflow::detail
