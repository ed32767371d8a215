#pragma once
// The typed model of a saga definition, as produced by the loader (definition_loader.hpp). Pure
// data: no I/O. A definition is immutable once loaded; running instances pin it by `hash`.

#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/condition.hpp"

namespace sagaflow {

enum class StepKind {
    kCompensatable,  // has a compensation; runs before the pivot
    kPivot,          // the go/no-go point: no compensation, everything after it must succeed
    kRetriable,      // after the pivot: retried until it succeeds, never compensated
};

enum class FieldType { kString, kInteger, kDecimal, kBoolean, kObject, kArray };

std::string_view ToString(StepKind kind) noexcept;
std::string_view ToString(FieldType type) noexcept;

// One field of the saga's input schema. `properties` for objects, `items` (zero or one entry) for
// arrays.
struct FieldSchema {
    std::string name;
    FieldType type = FieldType::kString;
    bool required = false;
    std::optional<nlohmann::json> default_value;
    std::string description;
    std::vector<FieldSchema> properties;
    std::vector<FieldSchema> items;
};

struct RetryPolicy {
    int max_attempts = 3;
    std::chrono::milliseconds initial_backoff{200};
    std::chrono::milliseconds max_backoff{10'000};
    double multiplier = 2.0;
    double jitter = 0.2;  // fraction of the delay drawn at random, 0..1

    // The delay before attempt `attempt` (2 = first retry), without jitter: capped exponential.
    std::chrono::milliseconds BackoffBefore(int attempt) const;
};

// A command template: JSON in which a string "$.a.b" is a path into the saga's context
// ($.sagaId, $.input.*, $.data.*, $.steps.<name>.reply.*). "$$." escapes a literal "$.".
struct CommandSpec {
    std::string type;     // e.g. "ChargePayment.v1"
    nlohmann::json send;  // object template
};

struct StepDefinition {
    std::string name;
    std::string participant;  // commands go to "<participant>.commands"
    StepKind kind = StepKind::kCompensatable;
    CommandSpec action;
    std::optional<CommandSpec> compensation;
    nlohmann::json save;  // object: data key -> "$.reply..." path
    std::chrono::milliseconds timeout{30'000};
    // How long an attempt may wait for the participant's consumer group to read its command (and
    // for the engine to read the replies written meanwhile) before its `timeout` starts to count;
    // past it the attempt times out as if the participant had had it. Unset: kDefaultStartTimeout.
    std::optional<std::chrono::milliseconds> start_timeout;
    RetryPolicy retry;
    // The steps this one waits for (by name, sorted). Unset: the step listed before it (none for
    // the first), so a list of steps without `after` is a straight line, as it always was.
    std::optional<std::vector<std::string>> after;
    // Run only if this holds when the steps it waits for are done; else skipped (never compensated,
    // and its dependants treat it as done).
    std::optional<Condition> when;

    static constexpr std::chrono::milliseconds kDefaultStartTimeout{10 * 60'000};
    std::chrono::milliseconds StartTimeout() const { return start_timeout.value_or(kDefaultStartTimeout); }
    std::string CommandTopic() const { return participant + ".commands"; }
};

struct SagaDefinition {
    std::string name;
    int version = 1;
    std::string description;
    std::vector<FieldSchema> input;
    std::chrono::milliseconds timeout{30'000};
    std::optional<std::chrono::milliseconds> start_timeout;  // defaults.startTimeout, if set
    RetryPolicy retry;
    RetryPolicy compensation_retry;
    // Cancelled (as by CancelSaga) if still running before its point of no return this long after
    // its start; none by default.
    std::optional<std::chrono::milliseconds> deadline;
    std::vector<StepDefinition> steps;
    std::string hash;  // SHA-256 (hex) of Canonical().dump()

    // Every setting resolved (defaults applied), keys sorted: two files that mean the same saga
    // have the same canonical form and hash.
    nlohmann::json Canonical() const;
    std::optional<std::size_t> PivotIndex() const;
    const StepDefinition* FindStep(std::string_view step_name) const;
};

// One problem with a saga's input: the JSON path of the field and what is wrong with it.
struct InputError {
    std::string path;
    std::string message;
};

// Checks `input` against the definition's input schema and fills in defaults. Returns every error,
// not only the first; on success (empty result) `input` holds the defaults too.
std::vector<InputError> ValidateInput(const SagaDefinition& definition, nlohmann::json& input);

// Room for what a command carries besides its data: the CloudEvents attributes, trace context and
// headers (a few hundred bytes in practice).
inline constexpr std::size_t kCommandEnvelopeBytes = 4096;

// The commands of every step (actions and compensations) rendered for `input`, before the saga
// starts: one error for each whose size, with kCommandEnvelopeBytes, would exceed `max_bytes` (the
// producer's message.max.bytes), since the broker would refuse it and the saga would wait forever.
// Data saved from replies is not known yet and counts as null.
std::vector<InputError> CheckCommandSizes(const SagaDefinition& definition,
                                          const nlohmann::json& input,
                                          std::size_t max_bytes);

// Resolves a command template against a context {sagaId, input, data, steps:{name:{reply}}}.
// A path that leads nowhere yields null.
nlohmann::json RenderTemplate(const nlohmann::json& tmpl, const nlohmann::json& context);

}  // namespace sagaflow
