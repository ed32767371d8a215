#pragma once

#include <string>
#include <string_view>

namespace sagaflow {

// Lowercase hex SHA-256 of `data` (OpenSSL EVP).
std::string Sha256Hex(std::string_view data);

}  // namespace sagaflow
