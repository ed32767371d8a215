#include "core/definition.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/text_scan.hpp"

namespace sagaflow {

std::string_view ToString(StepKind kind) noexcept {
    switch (kind) {
        case StepKind::kCompensatable:
            return "compensatable";
        case StepKind::kPivot:
            return "pivot";
        case StepKind::kRetriable:
            return "retriable";
    }
    return "?";
}

std::string_view ToString(FieldType type) noexcept {
    switch (type) {
        case FieldType::kString:
            return "string";
        case FieldType::kInteger:
            return "integer";
        case FieldType::kDecimal:
            return "decimal";
        case FieldType::kBoolean:
            return "boolean";
        case FieldType::kObject:
            return "object";
        case FieldType::kArray:
            return "array";
    }
    return "?";
}

std::chrono::milliseconds RetryPolicy::BackoffBefore(int attempt) const {
    if (attempt <= 1) {
        return std::chrono::milliseconds{0};
    }
    const double delay =
        static_cast<double>(initial_backoff.count()) * std::pow(multiplier, static_cast<double>(attempt - 2));
    const double capped = std::min(delay, static_cast<double>(max_backoff.count()));
    return std::chrono::milliseconds{static_cast<long long>(capped)};
}

namespace {

nlohmann::json RetryJson(const RetryPolicy& retry) {
    return {{"maxAttempts", retry.max_attempts},
            {"initialBackoffMs", retry.initial_backoff.count()},
            {"maxBackoffMs", retry.max_backoff.count()},
            {"multiplier", retry.multiplier},
            {"jitter", retry.jitter}};
}

nlohmann::json FieldJson(const FieldSchema& field) {
    nlohmann::json out{{"name", field.name},
                       {"type", ToString(field.type)},
                       {"required", field.required},
                       {"description", field.description}};
    if (field.default_value) {
        out["default"] = *field.default_value;
    }
    auto properties = nlohmann::json::array();
    for (const auto& property : field.properties) {
        properties.push_back(FieldJson(property));
    }
    out["properties"] = properties;
    if (!field.items.empty()) {
        out["items"] = FieldJson(field.items.front());
    }
    return out;
}

nlohmann::json CommandJson(const CommandSpec& command) {
    return {{"type", command.type}, {"send", command.send}};
}

}  // namespace

nlohmann::json SagaDefinition::Canonical() const {
    auto input_json = nlohmann::json::array();
    for (const auto& field : input) {
        input_json.push_back(FieldJson(field));
    }
    auto steps_json = nlohmann::json::array();
    for (const auto& step : steps) {
        nlohmann::json s{{"name", step.name},
                         {"participant", step.participant},
                         {"kind", ToString(step.kind)},
                         {"action", CommandJson(step.action)},
                         {"save", step.save},
                         {"timeoutMs", step.timeout.count()},
                         {"retry", RetryJson(step.retry)}};
        s["compensation"] = step.compensation ? CommandJson(*step.compensation) : nlohmann::json();
        // Only when set, as the deadline below: existing definitions keep their hashes.
        if (step.start_timeout) s["startTimeoutMs"] = step.start_timeout->count();
        if (step.after) s["after"] = *step.after;
        if (step.when) s["when"] = ToJson(*step.when);
        steps_json.push_back(std::move(s));
    }
    nlohmann::json out{{"saga", name},
                       {"version", version},
                       {"description", description},
                       {"input", input_json},
                       {"timeoutMs", timeout.count()},
                       {"retry", RetryJson(retry)},
                       {"compensationRetry", RetryJson(compensation_retry)},
                       {"steps", steps_json}};
    // Only when set: a definition without a deadline keeps the hash it had before deadlines existed
    // (a deployed database pins its sagas to those hashes).
    if (deadline) out["deadlineMs"] = deadline->count();
    return out;
}

std::optional<std::size_t> SagaDefinition::PivotIndex() const {
    for (std::size_t i = 0; i < steps.size(); ++i) {
        if (steps[i].kind == StepKind::kPivot) {
            return i;
        }
    }
    return std::nullopt;
}

const StepDefinition* SagaDefinition::FindStep(std::string_view step_name) const {
    const auto it = std::find_if(steps.begin(), steps.end(), [&](const auto& s) { return s.name == step_name; });
    return it == steps.end() ? nullptr : &*it;
}

namespace {

void ValidateField(const FieldSchema& field,
                   nlohmann::json& value,
                   const std::string& path,
                   std::vector<InputError>& errors) {
    const auto fail = [&](std::string message) { errors.push_back({path, std::move(message)}); };
    switch (field.type) {
        case FieldType::kString:
            if (!value.is_string()) fail("must be a string");
            break;
        case FieldType::kInteger:
            if (!value.is_number_integer()) {
                fail("must be an integer");
            } else if (value.is_number_unsigned() &&
                       value.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
                // Participants store integers as 64-bit signed numbers: 2^64-1 would become -1.
                fail("must be an integer from -9223372036854775808 to 9223372036854775807");
            }
            break;
        case FieldType::kDecimal:
            if (!value.is_string() || !text::IsDecimal(value.get_ref<const std::string&>())) {
                fail("must be a decimal number written as a string, e.g. \"10.50\"");
            }
            break;
        case FieldType::kBoolean:
            if (!value.is_boolean()) fail("must be true or false");
            break;
        case FieldType::kObject: {
            if (!value.is_object()) {
                fail("must be an object");
                break;
            }
            for (const auto& property : field.properties) {
                const std::string child = path + "." + property.name;
                if (!value.contains(property.name)) {
                    if (property.default_value) {
                        value[property.name] = *property.default_value;
                    } else if (property.required) {
                        errors.push_back({child, "is required"});
                    }
                    continue;
                }
                ValidateField(property, value[property.name], child, errors);
            }
            for (const auto& item : value.items()) {
                const std::string& key = item.key();
                const bool known = std::any_of(
                    field.properties.begin(), field.properties.end(), [&](const auto& p) { return p.name == key; });
                if (!known)
                    errors.push_back({path + "." + text::Quote(key, 64, false), "is not a field of this saga's input"});
            }
            break;
        }
        case FieldType::kArray:
            if (!value.is_array()) {
                fail("must be an array");
                break;
            }
            if (!field.items.empty()) {
                for (std::size_t i = 0; i < value.size(); ++i) {
                    ValidateField(field.items.front(), value[i], path + "[" + std::to_string(i) + "]", errors);
                }
            }
            break;
    }
}

}  // namespace

std::vector<InputError> CheckCommandSizes(const SagaDefinition& definition,
                                          const nlohmann::json& input,
                                          std::size_t max_bytes) {
    std::vector<InputError> errors;
    const nlohmann::json context{{"sagaId", "00000000-0000-0000-0000-000000000000"},
                                 {"input", input},
                                 {"data", nlohmann::json::object()},
                                 {"steps", nlohmann::json::object()}};
    const auto check = [&](const StepDefinition& step, const CommandSpec& spec, const char* phase) {
        const std::size_t size =
            RenderTemplate(spec.send, context).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size() +
            kCommandEnvelopeBytes;
        if (size <= max_bytes) return;
        errors.push_back({"$",
                          "makes the " + std::string(phase) + " of step '" + step.name + "' (" + spec.type +
                              ") about " + std::to_string(size) + " bytes, over the message limit of " +
                              std::to_string(max_bytes) +
                              " bytes (the producer's message.max.bytes): send less, or raise the limit on the "
                              "producer and the broker (max.message.bytes)"});
    };
    for (const auto& step : definition.steps) {
        check(step, step.action, "action");
        if (step.compensation) check(step, *step.compensation, "compensation");
    }
    return errors;
}

std::vector<InputError> ValidateInput(const SagaDefinition& definition, nlohmann::json& input) {
    std::vector<InputError> errors;
    if (!input.is_object()) {
        errors.push_back({"$", "the input must be a JSON object"});
        return errors;
    }
    FieldSchema root;
    root.name = "$";
    root.type = FieldType::kObject;
    root.properties = definition.input;
    ValidateField(root, input, "$", errors);
    return errors;
}

nlohmann::json RenderTemplate(const nlohmann::json& tmpl, const nlohmann::json& context) {
    if (tmpl.is_string()) {
        const auto& text = tmpl.get_ref<const std::string&>();
        if (text.rfind("$$.", 0) == 0) {
            return text.substr(1);
        }
        if (text.rfind("$.", 0) != 0) {
            return tmpl;
        }
        const nlohmann::json* at = &context;
        std::size_t start = 2;
        while (start <= text.size()) {
            const auto dot = text.find('.', start);
            const std::string segment = text.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
            if (!at->is_object() || !at->contains(segment)) {
                return nullptr;
            }
            at = &(*at)[segment];
            if (dot == std::string::npos) break;
            start = dot + 1;
        }
        return *at;
    }
    if (tmpl.is_object()) {
        nlohmann::json out = nlohmann::json::object();
        for (const auto& [key, value] : tmpl.items()) {
            out[key] = RenderTemplate(value, context);
        }
        return out;
    }
    if (tmpl.is_array()) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& value : tmpl) {
            out.push_back(RenderTemplate(value, context));
        }
        return out;
    }
    return tmpl;
}

}  // namespace sagaflow
