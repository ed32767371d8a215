#pragma once
// The saga state machine as a pure function: (definition, state, event) -> (new state, commands).
// No I/O and no clock: the orchestrator loads the state under the saga's lock, calls Decide,
// persists the new state and turns the commands into outbox rows and timers in the same
// transaction. Every transition is unit-tested without services.
//
// The steps form a graph (step_graph.hpp): every step whose steps-to-wait-for are done runs, so
// several step phases may be in flight at once.
//
// Step phases are identified by (step name, phase); a phase is dispatched at most once (the
// saga_step primary key) and every resend of it reuses its command event id, so commands carry an
// attempt number but never a new id.

#include <chrono>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/definition.hpp"

namespace sagaflow::machine {

enum class SagaStatus { kRunning, kCompensating, kCompleted, kCompensated, kFailed };
enum class Phase { kAction, kCompensation };
enum class StepStatus { kDispatched, kSucceeded, kFailed, kSkipped };
enum class Outcome { kSuccess, kFailure, kRetry };

std::string_view ToString(SagaStatus status) noexcept;
std::string_view ToString(Phase phase) noexcept;
// The text forms, for streams (and test output).
std::ostream& operator<<(std::ostream& out, SagaStatus status);
std::ostream& operator<<(std::ostream& out, Phase phase);
// The text forms above back (nullopt for any other text).
std::optional<SagaStatus> ParseSagaStatus(std::string_view text) noexcept;
std::optional<Phase> ParsePhase(std::string_view text) noexcept;

struct StepPhaseState;

// How a step phase stands as saga_step.status stores it and a saga's view shows it: StepStatus,
// with the two failures whose outcome is unknown told apart (an action that never answered, one in
// flight when the saga was cancelled or a branch beside it failed).
enum class StepPhaseStatus { kDispatched, kSucceeded, kFailed, kTimedOut, kCancelled, kSkipped };
std::string_view ToString(StepPhaseStatus status) noexcept;
std::ostream& operator<<(std::ostream& out, StepPhaseStatus status);
std::optional<StepPhaseStatus> ParseStepPhaseStatus(std::string_view text) noexcept;
StepPhaseStatus StatusOf(const StepPhaseState& phase) noexcept;
// Sets the phase's status, outcome_unknown and cancelled as `status` says.
void SetStatus(StepPhaseState& phase, StepPhaseStatus status) noexcept;

struct StepPhaseState {
    std::string step_name;
    Phase phase = Phase::kAction;
    StepStatus status = StepStatus::kDispatched;
    int attempt = 1;
    bool awaiting_retry = false;   // a retry is scheduled; the old attempt's deadline is moot
    bool outcome_unknown = false;  // an action that never answered: compensated to be safe
    bool cancelled = false;        // outcome unknown because the saga was cancelled while it was in flight
    nlohmann::json reply;
};

struct SagaState {
    SagaStatus status = SagaStatus::kRunning;
    std::size_t current_step = 0;  // the highest step index started or skipped
    nlohmann::json data = nlohmann::json::object();
    std::vector<StepPhaseState> phases;  // every dispatched (or skipped) step phase, in that order
    std::string parked_reason;           // set when status is kFailed

    const StepPhaseState* Find(const std::string& step_name, Phase phase) const;
    StepPhaseState* Find(const std::string& step_name, Phase phase);
};

// Events.
struct Begin {};
struct Reply {
    std::string step_name;
    Phase phase = Phase::kAction;
    int attempt = 1;  // the attempt the reply answers (from the command it correlates to)
    Outcome outcome = Outcome::kSuccess;
    nlohmann::json data = nlohmann::json::object();
};
struct Timeout {  // the deadline of (step, phase, attempt) passed without a reply
    std::string step_name;
    Phase phase = Phase::kAction;
    int attempt = 1;
};
struct RetryDue {  // the backoff before the next attempt of (step, phase) elapsed
    std::string step_name;
    Phase phase = Phase::kAction;
    int attempt = 1;  // the attempt to send now
};
// An operator or the application calls the saga off. Only a saga still running before its point of
// no return can be cancelled: each step in flight is treated as an action whose outcome is unknown
// (compensated first: a participant records a compensation that arrives before its action as a null
// compensation and refuses the late action), then the completed steps, each after the steps that
// waited for it. Refused
// (`ignored` says why) once a pivot or retriable step has been reached, while compensating, or
// when the saga has ended.
struct Cancel {
    std::string reason;
};
using Event = std::variant<Begin, Reply, Timeout, RetryDue, Cancel>;

// Commands.
struct Dispatch {  // send the step phase's command (a new row, or a resend of the same event)
    std::string step_name;
    Phase phase = Phase::kAction;
    int attempt = 1;
    std::chrono::milliseconds timeout{0};
};
struct ScheduleRetry {
    std::string step_name;
    Phase phase = Phase::kAction;
    int attempt = 2;  // the attempt that will be sent
    std::chrono::milliseconds delay{0};
};
struct Finish {
    SagaStatus status = SagaStatus::kCompleted;
};
struct Skip {  // the step's `when:` is false: it is done without running (a timeline entry says why)
    std::string step_name;
    std::string reason;
};
using Command = std::variant<Dispatch, ScheduleRetry, Finish, Skip>;

struct Decision {
    SagaState state;
    std::vector<Command> commands;
    std::optional<std::string> ignored;  // set: the event changed nothing, and why (duplicate, stale, ...)
};

// `input` is the saga's input, for the steps' `when:` conditions.
Decision Decide(const SagaDefinition& definition,
                const SagaState& state,
                const Event& event,
                const nlohmann::json& input);
// The same for a saga whose conditions read no input.
Decision Decide(const SagaDefinition& definition, const SagaState& state, const Event& event);

}  // namespace sagaflow::machine
