#pragma once

#include <string>
#include <string_view>

namespace sagaflow::store::detail {

// Lowercase hex SHA-256 of `data` (OpenSSL EVP).
std::string Sha256Hex(std::string_view data);

}  // namespace sagaflow::store::detail
