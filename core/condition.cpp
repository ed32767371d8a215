#include "core/condition.hpp"

#include <cstdlib>

#include "core/definition.hpp"
#include "core/text_scan.hpp"

namespace sagaflow {

namespace {

constexpr std::pair<Condition::Op, std::string_view> kOps[] = {
    {Condition::Op::kEquals, "equals"},
    {Condition::Op::kNotEquals, "notEquals"},
    {Condition::Op::kIn, "in"},
    {Condition::Op::kExists, "exists"},
    {Condition::Op::kGreaterThan, "greaterThan"},
    {Condition::Op::kAtLeast, "atLeast"},
    {Condition::Op::kLessThan, "lessThan"},
    {Condition::Op::kAtMost, "atMost"},
    {Condition::Op::kAll, "all"},
    {Condition::Op::kAny, "any"},
    {Condition::Op::kNot, "not"},
};

// A number, or a decimal written as a string: its value; anything else: none.
std::optional<long double> Number(const nlohmann::json& value) {
    if (value.is_number()) return value.get<long double>();
    if (value.is_string() && text::IsDecimal(value.get_ref<const std::string&>())) {
        return std::strtold(value.get_ref<const std::string&>().c_str(), nullptr);
    }
    return std::nullopt;
}

bool Same(const nlohmann::json& a, const nlohmann::json& b) {
    if (a == b) return true;
    const auto x = Number(a);
    const auto y = Number(b);
    return x && y && (a.is_string() || b.is_string()) && *x == *y;
}

nlohmann::json Lookup(const std::string& path, const nlohmann::json& context) {
    return RenderTemplate(nlohmann::json(path), context);
}

bool Present(const std::string& path, const nlohmann::json& context) {
    return !Lookup(path, context).is_null();
}

}  // namespace

std::string_view ToString(Condition::Op op) noexcept {
    for (const auto& [o, name] : kOps) {
        if (o == op) return name;
    }
    return "?";
}

std::optional<Condition::Op> ParseConditionOp(std::string_view key) noexcept {
    for (const auto& [o, name] : kOps) {
        if (name == key) return o;
    }
    return std::nullopt;
}

bool IsOrdering(Condition::Op op) noexcept {
    return op == Condition::Op::kGreaterThan || op == Condition::Op::kAtLeast || op == Condition::Op::kLessThan ||
           op == Condition::Op::kAtMost;
}

nlohmann::json ToJson(const Condition& c) {
    if (c.IsLeaf()) return {{"path", c.path}, {std::string(ToString(c.op)), c.value}};
    if (c.op == Condition::Op::kNot) return {{"not", c.operands.empty() ? nlohmann::json() : ToJson(c.operands[0])}};
    auto list = nlohmann::json::array();
    for (const auto& operand : c.operands) list.push_back(ToJson(operand));
    return {{std::string(ToString(c.op)), list}};
}

std::string Describe(const Condition& c) {
    if (c.IsLeaf()) return c.path + " " + std::string(ToString(c.op)) + " " + c.value.dump();
    if (c.op == Condition::Op::kNot) return "not (" + (c.operands.empty() ? "" : Describe(c.operands[0])) + ")";
    std::string out;
    for (const auto& operand : c.operands) {
        if (!out.empty()) out += c.op == Condition::Op::kAll ? " and " : " or ";
        out += operand.IsLeaf() ? Describe(operand) : "(" + Describe(operand) + ")";
    }
    return out;
}

bool Evaluate(const Condition& c, const nlohmann::json& context) {
    switch (c.op) {
        case Condition::Op::kAll:
            for (const auto& operand : c.operands) {
                if (!Evaluate(operand, context)) return false;
            }
            return true;
        case Condition::Op::kAny:
            for (const auto& operand : c.operands) {
                if (Evaluate(operand, context)) return true;
            }
            return false;
        case Condition::Op::kNot:
            return c.operands.empty() || !Evaluate(c.operands[0], context);
        case Condition::Op::kExists:
            return Present(c.path, context) == (c.value.is_boolean() && c.value.get<bool>());
        default:
            break;
    }
    const nlohmann::json actual = Lookup(c.path, context);
    switch (c.op) {
        case Condition::Op::kEquals:
            return !actual.is_null() && Same(actual, c.value);
        case Condition::Op::kNotEquals:
            return actual.is_null() || !Same(actual, c.value);
        case Condition::Op::kIn:
            if (actual.is_null() || !c.value.is_array()) return false;
            for (const auto& item : c.value) {
                if (Same(actual, item)) return true;
            }
            return false;
        default:
            break;
    }
    const auto x = Number(actual);
    const auto y = Number(c.value);
    if (!x || !y) return false;
    switch (c.op) {
        case Condition::Op::kGreaterThan:
            return *x > *y;
        case Condition::Op::kAtLeast:
            return *x >= *y;
        case Condition::Op::kLessThan:
            return *x < *y;
        case Condition::Op::kAtMost:
            return *x <= *y;
        default:
            return false;
    }
}

std::string Explain(const Condition& c, const nlohmann::json& context) {
    std::vector<std::string> paths;
    CollectPaths(c, paths);
    std::string out = Describe(c) + " is " + (Evaluate(c, context) ? "true" : "false");
    std::vector<std::string> seen;
    for (const auto& path : paths) {
        if (std::find(seen.begin(), seen.end(), path) != seen.end()) continue;
        seen.push_back(path);
        const nlohmann::json actual = Lookup(path, context);
        out += seen.size() == 1 ? ": " : ", ";
        out += path + (actual.is_null() ? " is absent" : " was " + text::Quote(actual.dump(), 60, false));
    }
    return out;
}

void CollectPaths(const Condition& c, std::vector<std::string>& paths) {
    if (c.IsLeaf()) {
        paths.push_back(c.path);
        return;
    }
    for (const auto& operand : c.operands) CollectPaths(operand, paths);
}

}  // namespace sagaflow
