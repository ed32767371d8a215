#pragma once
// The one way sagaflow reads JSON that comes from outside (HTTP bodies, Kafka records, files): limits
// on size and depth are checked while parsing, before anything recursive (copy, dump, compare)
// touches the value, and ambiguity is refused instead of resolved silently.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sagaflow {

struct JsonLimits {
    std::size_t max_bytes = 16u << 20;  // the whole text
    int max_depth = 64;                 // arrays and objects nested in one another; the top level is 1
};

// Why a text was refused; `message` names the cause and, where there is one, where (a JSON path
// like $.items[3].name, or the byte offset of a syntax error).
struct JsonRefusal {
    enum class Kind { kTooLarge, kSyntax, kTooDeep, kDuplicateKey, kNulCharacter };
    Kind kind = Kind::kSyntax;
    std::string message;
    std::string path;  // where, as $.items[3].name; empty for size and syntax
    std::string what;  // the message without its "the value at PATH" ("has the key 'a' twice; ...")
};

// Parses `text` as one JSON value. Refused, with the reason, when the text is over `max_bytes`, not
// JSON in UTF-8, nested deeper than `max_depth`, has an object with the same key twice, or a string
// or key holding U+0000 (PostgreSQL's jsonb cannot store it).
std::optional<nlohmann::json> ReadJson(std::string_view text, const JsonLimits& limits, JsonRefusal& refusal);
std::optional<nlohmann::json> ReadJson(std::string_view text, JsonRefusal& refusal);

}  // namespace sagaflow
