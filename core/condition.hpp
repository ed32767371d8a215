#pragma once
// A step's `when:`: a condition on the saga's input, saved data or earlier replies, evaluated once,
// when every step the step waits for is done. A step whose condition is false is skipped.
//
// Structured, not an expression language: each node is one YAML map, so the loader can point at the
// offending node by file:line:col, and the JSON Schema describes every form.
//   {path: $.input.insurance, equals: true}     also notEquals, in: [..], exists: true|false,
//   {path: $.input.nights, greaterThan: 3}       atLeast, lessThan, atMost (numbers or decimals)
//   {all: [..]}, {any: [..]}, {not: {..}}

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sagaflow {

struct Condition {
    enum class Op { kEquals, kNotEquals, kIn, kExists, kGreaterThan, kAtLeast, kLessThan, kAtMost, kAll, kAny, kNot };
    Op op = Op::kEquals;
    std::string path;                 // "$.input.x": the operators that compare a value
    nlohmann::json value;             // the literal compared with (kIn: an array; kExists: a boolean)
    std::vector<Condition> operands;  // kAll, kAny (one or more), kNot (exactly one)

    bool IsLeaf() const noexcept { return op != Op::kAll && op != Op::kAny && op != Op::kNot; }
};

std::string_view ToString(Condition::Op op) noexcept;  // the YAML key: "equals", "all", ...
std::optional<Condition::Op> ParseConditionOp(std::string_view key) noexcept;
// Whether the operator compares numbers (greaterThan, atLeast, lessThan, atMost).
bool IsOrdering(Condition::Op op) noexcept;

// The canonical JSON form (the YAML form, keys sorted): part of the definition's hash.
nlohmann::json ToJson(const Condition& condition);
// One line for people: "$.input.insurance equals true", "not ($.input.a exists)".
std::string Describe(const Condition& condition);
// Evaluates against the template context {sagaId, input, data, steps:{name:{reply}}}. A path that
// leads nowhere is absent: `exists` is false, every comparison false (so `notEquals` is true).
// Decimals written as strings ("10.50") compare as numbers.
bool Evaluate(const Condition& condition, const nlohmann::json& context);
// The same, with the value each path had, for the timeline: "$.input.insurance was false".
std::string Explain(const Condition& condition, const nlohmann::json& context);
// Every path the condition reads, in order.
void CollectPaths(const Condition& condition, std::vector<std::string>& paths);

}  // namespace sagaflow
