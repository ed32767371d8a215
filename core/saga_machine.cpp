#include "core/saga_machine.hpp"

#include <ostream>

#include <algorithm>

namespace sagaflow::machine {

std::string_view ToString(SagaStatus status) noexcept {
    switch (status) {
        case SagaStatus::kRunning:
            return "running";
        case SagaStatus::kCompensating:
            return "compensating";
        case SagaStatus::kCompleted:
            return "completed";
        case SagaStatus::kCompensated:
            return "compensated";
        case SagaStatus::kFailed:
            return "failed";
    }
    return "?";
}

std::string_view ToString(Phase phase) noexcept {
    return phase == Phase::kAction ? "action" : "compensation";
}

std::ostream& operator<<(std::ostream& out, SagaStatus status) {
    return out << ToString(status);
}

std::ostream& operator<<(std::ostream& out, Phase phase) {
    return out << ToString(phase);
}

std::optional<SagaStatus> ParseSagaStatus(std::string_view text) noexcept {
    for (const auto status : {SagaStatus::kRunning,
                              SagaStatus::kCompensating,
                              SagaStatus::kCompleted,
                              SagaStatus::kCompensated,
                              SagaStatus::kFailed}) {
        if (ToString(status) == text) return status;
    }
    return std::nullopt;
}

std::optional<Phase> ParsePhase(std::string_view text) noexcept {
    if (text == "action") return Phase::kAction;
    if (text == "compensation") return Phase::kCompensation;
    return std::nullopt;
}

std::string_view ToString(StepPhaseStatus status) noexcept {
    switch (status) {
        case StepPhaseStatus::kDispatched:
            return "dispatched";
        case StepPhaseStatus::kSucceeded:
            return "succeeded";
        case StepPhaseStatus::kFailed:
            return "failed";
        case StepPhaseStatus::kTimedOut:
            return "timed_out";
        case StepPhaseStatus::kCancelled:
            return "cancelled";
    }
    return "?";
}

std::ostream& operator<<(std::ostream& out, StepPhaseStatus status) {
    return out << ToString(status);
}

std::optional<StepPhaseStatus> ParseStepPhaseStatus(std::string_view text) noexcept {
    for (const auto status : {StepPhaseStatus::kDispatched,
                              StepPhaseStatus::kSucceeded,
                              StepPhaseStatus::kFailed,
                              StepPhaseStatus::kTimedOut,
                              StepPhaseStatus::kCancelled}) {
        if (ToString(status) == text) return status;
    }
    return std::nullopt;
}

StepPhaseStatus StatusOf(const StepPhaseState& phase) noexcept {
    switch (phase.status) {
        case StepStatus::kDispatched:
            return StepPhaseStatus::kDispatched;
        case StepStatus::kSucceeded:
            return StepPhaseStatus::kSucceeded;
        case StepStatus::kFailed:
            break;
    }
    return !phase.outcome_unknown ? StepPhaseStatus::kFailed
           : phase.cancelled      ? StepPhaseStatus::kCancelled
                                  : StepPhaseStatus::kTimedOut;
}

void SetStatus(StepPhaseState& phase, StepPhaseStatus status) noexcept {
    phase.cancelled = status == StepPhaseStatus::kCancelled;
    phase.outcome_unknown = status == StepPhaseStatus::kTimedOut || phase.cancelled;
    phase.status = status == StepPhaseStatus::kDispatched  ? StepStatus::kDispatched
                   : status == StepPhaseStatus::kSucceeded ? StepStatus::kSucceeded
                                                           : StepStatus::kFailed;
}

const StepPhaseState* SagaState::Find(const std::string& step_name, Phase phase) const {
    const auto it = std::find_if(
        phases.begin(), phases.end(), [&](const auto& p) { return p.step_name == step_name && p.phase == phase; });
    return it == phases.end() ? nullptr : &*it;
}

StepPhaseState* SagaState::Find(const std::string& step_name, Phase phase) {
    return const_cast<StepPhaseState*>(std::as_const(*this).Find(step_name, phase));
}

namespace {

bool Terminal(SagaStatus status) {
    return status == SagaStatus::kCompleted || status == SagaStatus::kCompensated || status == SagaStatus::kFailed;
}

class Machine {
  public:
    Machine(const SagaDefinition& definition, const SagaState& state) : def_(definition) { decision_.state = state; }

    Decision Run(const Event& event) {
        std::visit([this](const auto& e) { On(e); }, event);
        return std::move(decision_);
    }

  private:
    SagaState& S() { return decision_.state; }

    void Ignore(std::string why) { decision_.ignored = std::move(why); }

    const RetryPolicy& Policy(const StepDefinition& step, Phase phase) const {
        return phase == Phase::kAction ? step.retry : def_.compensation_retry;
    }

    std::optional<std::size_t> IndexOf(const std::string& name) const {
        for (std::size_t i = 0; i < def_.steps.size(); ++i) {
            if (def_.steps[i].name == name) return i;
        }
        return std::nullopt;
    }

    void StartPhase(std::size_t index, Phase phase) {
        const auto& step = def_.steps[index];
        S().phases.push_back({step.name, phase, StepStatus::kDispatched, 1, false, false, false, nullptr});
        decision_.commands.push_back(Dispatch{step.name, phase, 1, step.timeout});
    }

    void Finish(SagaStatus status, std::string reason = {}) {
        S().status = status;
        S().parked_reason = std::move(reason);
        decision_.commands.push_back(machine::Finish{status});
    }

    // Compensates, newest first, every step below `below` whose action took effect (or may have:
    // outcome unknown) and whose compensation has not been dispatched yet.
    void CompensateBelow(std::size_t below) {
        S().status = SagaStatus::kCompensating;
        for (std::size_t j = below; j-- > 0;) {
            const auto& step = def_.steps[j];
            if (!step.compensation || S().Find(step.name, Phase::kCompensation) != nullptr) continue;
            const StepPhaseState* action = S().Find(step.name, Phase::kAction);
            if (action == nullptr) continue;
            if (action->status == StepStatus::kSucceeded || action->outcome_unknown) {
                StartPhase(j, Phase::kCompensation);
                return;
            }
        }
        Finish(SagaStatus::kCompensated);
    }

    // The phase ran out of attempts without a definite answer.
    void Exhausted(std::size_t index, StepPhaseState& phase) {
        const auto& step = def_.steps[index];
        phase.status = StepStatus::kFailed;
        phase.awaiting_retry = false;
        const std::string attempts = std::to_string(phase.attempt) + " attempts";
        if (phase.phase == Phase::kCompensation) {
            Finish(SagaStatus::kFailed,
                   "compensation of step '" + step.name + "' did not succeed after " + attempts +
                       "; an operator must resolve it and retry the saga");
            return;
        }
        switch (step.kind) {
            case StepKind::kCompensatable:
                phase.outcome_unknown = true;  // it may have taken effect: undo it too
                CompensateBelow(index + 1);
                return;
            case StepKind::kPivot:
                Finish(SagaStatus::kFailed,
                       "the pivot '" + step.name + "' gave no definite answer after " + attempts +
                           "; an operator must decide whether it took effect");
                return;
            case StepKind::kRetriable:
                Finish(SagaStatus::kFailed,
                       "retriable step '" + step.name + "' did not succeed after " + attempts +
                           "; an operator must resolve it and retry the saga");
                return;
        }
    }

    void RetryOrExhaust(std::size_t index, StepPhaseState& phase) {
        const RetryPolicy& policy = Policy(def_.steps[index], phase.phase);
        if (phase.attempt >= policy.max_attempts) {
            Exhausted(index, phase);
            return;
        }
        phase.awaiting_retry = true;
        decision_.commands.push_back(
            ScheduleRetry{phase.step_name, phase.phase, phase.attempt + 1, policy.BackoffBefore(phase.attempt + 1)});
    }

    // Common checks of an event about (step, phase): returns the phase when it is live.
    StepPhaseState* Live(const std::string& step_name, Phase phase, std::optional<std::size_t>& index) {
        if (Terminal(S().status)) {
            Ignore("the saga is already " + std::string(ToString(S().status)));
            return nullptr;
        }
        index = IndexOf(step_name);
        if (!index) {
            Ignore("no step named '" + step_name + "' in this definition");
            return nullptr;
        }
        StepPhaseState* state = S().Find(step_name, phase);
        if (state == nullptr) {
            Ignore("the " + std::string(ToString(phase)) + " of step '" + step_name + "' was never dispatched");
            return nullptr;
        }
        if (state->status != StepStatus::kDispatched) {
            const std::string what = "the " + std::string(ToString(phase)) + " of step '" + step_name + "'";
            if (state->cancelled) {
                Ignore(what +
                       " was cancelled while in flight and is treated as done, then compensated: this late "
                       "event changes nothing");
            } else if (state->outcome_unknown) {
                Ignore(what +
                       " timed out on its last attempt and is treated as done, then compensated: this late "
                       "event changes nothing");
            } else {
                Ignore(what + " is already answered");
            }
            return nullptr;
        }
        return state;
    }

    void On(const Begin&) {
        if (!S().phases.empty() || Terminal(S().status)) {
            Ignore("the saga has already begun");
            return;
        }
        if (def_.steps.empty()) {
            Finish(SagaStatus::kCompleted);
            return;
        }
        S().status = SagaStatus::kRunning;
        S().current_step = 0;
        StartPhase(0, Phase::kAction);
    }

    void On(const Reply& reply) {
        std::optional<std::size_t> index;
        StepPhaseState* phase = Live(reply.step_name, reply.phase, index);
        if (phase == nullptr) return;
        // Every attempt carries the same command, so a reply to an earlier attempt answers it too;
        // a reply to an attempt not sent yet is not ours.
        if (reply.attempt < 1 || reply.attempt > phase->attempt) {
            Ignore("reply to attempt " + std::to_string(reply.attempt) + ", but only " +
                   std::to_string(phase->attempt) + " were sent");
            return;
        }
        const auto& step = def_.steps[*index];
        Outcome outcome = reply.outcome;
        if (outcome == Outcome::kFailure && reply.phase == Phase::kAction && step.kind == StepKind::kRetriable) {
            outcome = Outcome::kRetry;  // after the point of no return a step can only be retried
        }
        if (outcome == Outcome::kFailure && reply.phase == Phase::kCompensation) {
            outcome = Outcome::kRetry;  // a compensation is retried until it succeeds
        }
        switch (outcome) {
            case Outcome::kRetry:
                RetryOrExhaust(*index, *phase);
                return;
            case Outcome::kFailure:
                phase->status = StepStatus::kFailed;
                phase->awaiting_retry = false;
                phase->reply = reply.data;
                CompensateBelow(*index);
                return;
            case Outcome::kSuccess:
                phase->status = StepStatus::kSucceeded;
                phase->awaiting_retry = false;
                phase->reply = reply.data;
                break;
        }
        if (reply.phase == Phase::kCompensation) {
            CompensateBelow(*index);
            return;
        }
        const nlohmann::json saved = RenderTemplate(step.save, {{"reply", reply.data}});
        for (const auto& [key, value] : saved.items()) S().data[key] = value;
        if (*index + 1 < def_.steps.size()) {
            S().current_step = *index + 1;
            StartPhase(*index + 1, Phase::kAction);
        } else {
            Finish(SagaStatus::kCompleted);
        }
    }

    void On(const Timeout& timeout) {
        std::optional<std::size_t> index;
        StepPhaseState* phase = Live(timeout.step_name, timeout.phase, index);
        if (phase == nullptr) return;
        if (timeout.attempt != phase->attempt || phase->awaiting_retry) {
            Ignore("stale timeout of attempt " + std::to_string(timeout.attempt));
            return;
        }
        RetryOrExhaust(*index, *phase);
    }

    void On(const RetryDue& due) {
        std::optional<std::size_t> index;
        StepPhaseState* phase = Live(due.step_name, due.phase, index);
        if (phase == nullptr) return;
        if (!phase->awaiting_retry || due.attempt != phase->attempt + 1) {
            Ignore("no retry of attempt " + std::to_string(due.attempt) + " is due");
            return;
        }
        phase->attempt = due.attempt;
        phase->awaiting_retry = false;
        decision_.commands.push_back(
            Dispatch{phase->step_name, phase->phase, phase->attempt, def_.steps[*index].timeout});
    }

    void On(const Cancel&) {
        if (Terminal(S().status) || S().status == SagaStatus::kCompensating) {
            Ignore("the saga is already " + std::string(ToString(S().status)));
            return;
        }
        if (S().phases.empty()) {
            Ignore("the saga has not begun");
            return;
        }
        // Reached in order: the first pivot or retriable step is the point of no return.
        for (std::size_t i = 0; i <= S().current_step && i < def_.steps.size(); ++i) {
            const auto& step = def_.steps[i];
            if (step.kind == StepKind::kCompensatable) continue;
            Ignore("step '" + step.name + "' is " + (step.kind == StepKind::kPivot ? "the pivot" : "retriable") +
                   (i == S().current_step ? " and in flight" : " and has succeeded") +
                   ": the saga is past its point of no return and can only complete");
            return;
        }
        StepPhaseState* current = S().Find(def_.steps[S().current_step].name, Phase::kAction);
        if (current == nullptr || current->status != StepStatus::kDispatched) {
            Ignore("step '" + def_.steps[S().current_step].name + "' is not in flight");
            return;
        }
        current->status = StepStatus::kFailed;
        current->awaiting_retry = false;
        current->outcome_unknown = true;  // it may take effect yet: undo it too
        current->cancelled = true;
        CompensateBelow(S().current_step + 1);
    }

    const SagaDefinition& def_;
    Decision decision_;
};

}  // namespace

Decision Decide(const SagaDefinition& definition, const SagaState& state, const Event& event) {
    return Machine(definition, state).Run(event);
}

}  // namespace sagaflow::machine
