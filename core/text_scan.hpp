#pragma once
// Hand-written scanners for the small languages of names, durations and numbers in sagaflow's inputs
// (std::regex recurses once per character and overflows the stack on a long line), and the one way
// to quote outside text back in an error or a log line.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace sagaflow::text {

// [a-z][a-z0-9-]{0,62}: saga types, participant and step names (the one-argument form is the
// function pointer the YAML readers take).
bool IsKebabName(std::string_view s);
// The same with another length limit.
bool IsKebabName(std::string_view s, std::size_t max_length);
// [A-Za-z_][A-Za-z0-9_]{0,62}: input fields and data keys.
bool IsFieldName(std::string_view s);
// [A-Za-z][A-Za-z0-9_]{0,62}(\.v[0-9]{1,9})?: command types such as ChargePayment.v1.
bool IsCommandType(std::string_view s);
// [A-Za-z0-9_-]+: one segment of a $.a.b path.
bool IsPathSegment(std::string_view s);
// [a-z_][a-z0-9_]{0,62}: a plain PostgreSQL identifier.
bool IsSqlName(std::string_view s);
// [A-Za-z0-9._-]{1,249}: a Kafka topic.
bool IsTopicName(std::string_view s);
// -?(0|[1-9][0-9]*)(\.[0-9]+)?, at most 64 characters: a decimal amount.
bool IsDecimal(std::string_view s);
// A run of 1..max_digits ASCII digits.
bool IsDigits(std::string_view s, std::size_t max_digits);

// "30s", "500ms", "5m", "2h": a whole number of 1..9 digits and a unit; its length in milliseconds.
std::optional<long long> ParseDurationMs(std::string_view s);

// `value` for an error message or a log line: cut to `max_bytes` (at a UTF-8 boundary, saying how
// much was left off), control characters and bytes that are not UTF-8 escaped (\n, \t, \x01,
// \xff), in single quotes when `quoted`.
// A newline from outside can then never start a second, forged log line.
std::string Quote(std::string_view value, std::size_t max_bytes = 120, bool quoted = true);

// Control characters and bytes that are not UTF-8 escaped, nothing cut: for values that are sagaflow's own but may
// carry a quoted outside value (a dead letter's reason), on their way into a log line.
std::string EscapeControl(std::string_view value);

}  // namespace sagaflow::text
