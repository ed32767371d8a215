#pragma once
// What the HTTP API reads from a request's body and headers before it calls the engine: pure, so
// the fuzz build (tests/fuzz/http_start_fuzz.cpp) drives it with the same code the server runs.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/bounded_json.hpp"

namespace sagaflow::detail {

// Why a body was refused, as the problem+json answer gives it.
struct BodyRefusal {
    unsigned status = 400;
    std::string type;  // the problem slug: malformed-json, ambiguous-json, invalid-input
    std::string title;
    std::string detail;
    std::string path;  // invalid-input: the field, as $.note
};

// The body as a JSON object in UTF-8, read within `limits` (core/bounded_json.hpp); otherwise the
// refusal: 400 for what is not such an object, 422 for a string PostgreSQL cannot store.
std::optional<BodyRefusal> ReadObjectBody(std::string_view text, const JsonLimits& limits, nlohmann::json& body);

// Content-Type application/json, parameters (charset=utf-8) allowed, case-insensitive; nothing
// else (no prefix match: application/jsonx is not JSON).
bool IsJsonContentType(std::string_view value);

}  // namespace sagaflow::detail
