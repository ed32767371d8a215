#include "core/saga_machine.hpp"

#include <algorithm>
#include <ostream>

#include "core/step_graph.hpp"

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
        case StepPhaseStatus::kSkipped:
            return "skipped";
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
                              StepPhaseStatus::kCancelled,
                              StepPhaseStatus::kSkipped}) {
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
        case StepStatus::kSkipped:
            return StepPhaseStatus::kSkipped;
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
                   : status == StepPhaseStatus::kSkipped   ? StepStatus::kSkipped
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
    Machine(const SagaDefinition& definition, const SagaState& state, const nlohmann::json& input)
        : def_(definition), graph_(definition), input_(input) {
        decision_.state = state;
    }

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

    const StepPhaseState* Action(std::size_t i) { return S().Find(def_.steps[i].name, Phase::kAction); }

    // Succeeded, or skipped: the steps waiting for it may go on.
    bool Done(std::size_t i) {
        const StepPhaseState* action = Action(i);
        return action != nullptr &&
               (action->status == StepStatus::kSucceeded || action->status == StepStatus::kSkipped);
    }

    bool InFlight(Phase phase) {
        return std::any_of(S().phases.begin(), S().phases.end(), [&](const auto& p) {
            return p.phase == phase && p.status == StepStatus::kDispatched;
        });
    }

    // The action took effect, or may have, and the compensation has not succeeded yet.
    bool OwesCompensation(std::size_t i) {
        const StepPhaseState* action = Action(i);
        if (!def_.steps[i].compensation || action == nullptr) return false;
        if (action->status != StepStatus::kSucceeded && !action->outcome_unknown) return false;
        const StepPhaseState* compensation = S().Find(def_.steps[i].name, Phase::kCompensation);
        return compensation == nullptr || compensation->status != StepStatus::kSucceeded;
    }

    // What `when:` conditions read: the template context without the saga id.
    nlohmann::json Context() {
        nlohmann::json steps = nlohmann::json::object();
        for (const auto& phase : S().phases) {
            if (phase.phase == Phase::kAction && phase.status == StepStatus::kSucceeded) {
                steps[phase.step_name] = {{"reply", phase.reply}};
            }
        }
        return {{"input", input_}, {"data", S().data}, {"steps", steps}};
    }

    void Reached(std::size_t index) {
        if (index > S().current_step || S().phases.empty()) S().current_step = index;
    }

    void StartPhase(std::size_t index, Phase phase) {
        const auto& step = def_.steps[index];
        if (phase == Phase::kAction) Reached(index);
        S().phases.push_back({step.name, phase, StepStatus::kDispatched, 1, false, false, false, nullptr});
        decision_.commands.push_back(Dispatch{step.name, phase, 1, step.timeout});
    }

    void Finish(SagaStatus status, std::string reason = {}) {
        S().status = status;
        S().parked_reason = std::move(reason);
        decision_.commands.push_back(machine::Finish{status});
    }

    // Runs every step whose steps-to-wait-for are done (or skips it when its condition is false),
    // then completes the saga when every step is done, or parks it when a retriable step gave up
    // and nothing else is in flight.
    void Advance() {
        for (const std::size_t i : graph_.Order()) {
            if (Action(i) != nullptr) continue;
            const auto& parents = graph_.Parents(i);
            if (!std::all_of(parents.begin(), parents.end(), [&](std::size_t p) { return Done(p); })) continue;
            const auto& step = def_.steps[i];
            if (step.when) {
                const nlohmann::json context = Context();
                if (!Evaluate(*step.when, context)) {
                    Reached(i);
                    StepPhaseState skipped{
                        step.name, Phase::kAction, StepStatus::kSkipped, 1, false, false, false, nullptr};
                    S().phases.push_back(std::move(skipped));
                    decision_.commands.push_back(Skip{step.name, Explain(*step.when, context)});
                    continue;  // later steps in the order see it done
                }
            }
            StartPhase(i, Phase::kAction);
        }
        bool all_done = true;
        for (std::size_t i = 0; i < def_.steps.size(); ++i) all_done = all_done && Done(i);
        if (all_done) {
            Finish(SagaStatus::kCompleted);
            return;
        }
        if (InFlight(Phase::kAction)) return;
        for (const auto& phase : S().phases) {
            if (phase.phase != Phase::kAction || phase.status != StepStatus::kFailed) continue;
            Finish(SagaStatus::kFailed,
                   "retriable step '" + phase.step_name + "' did not succeed after " + std::to_string(phase.attempt) +
                       " attempts; an operator must resolve it and retry the saga");
            return;
        }
    }

    // Stops every action in flight (its outcome unknown: compensated too) and compensates.
    void Compensate() {
        S().status = SagaStatus::kCompensating;
        for (auto& phase : S().phases) {
            if (phase.phase != Phase::kAction || phase.status != StepStatus::kDispatched) continue;
            phase.status = StepStatus::kFailed;
            phase.awaiting_retry = false;
            phase.outcome_unknown = true;  // it may take effect yet: undo it too
            phase.cancelled = true;
        }
        CompensateReady();
    }

    // Dispatches the compensation of every step that owes one and whose dependants (every step
    // that waited for it, directly or not) owe none; ends the saga when nothing is left: compensated,
    // or parked when a compensation gave up.
    void CompensateReady() {
        const auto& order = graph_.Order();
        for (auto it = order.rbegin(); it != order.rend(); ++it) {
            const std::size_t i = *it;
            if (!OwesCompensation(i) || S().Find(def_.steps[i].name, Phase::kCompensation) != nullptr) continue;
            bool blocked = false;
            for (std::size_t j = 0; j < def_.steps.size() && !blocked; ++j) {
                blocked = graph_.Before(i, j) && OwesCompensation(j);
            }
            if (!blocked) StartPhase(i, Phase::kCompensation);
        }
        if (InFlight(Phase::kCompensation)) return;
        for (const auto& phase : S().phases) {
            if (phase.phase != Phase::kCompensation || phase.status != StepStatus::kFailed) continue;
            Finish(SagaStatus::kFailed,
                   "compensation of step '" + phase.step_name + "' did not succeed after " +
                       std::to_string(phase.attempt) + " attempts; an operator must resolve it and retry the saga");
            return;
        }
        Finish(SagaStatus::kCompensated);
    }

    // The phase ran out of attempts without a definite answer.
    void Exhausted(std::size_t index, StepPhaseState& phase) {
        const auto& step = def_.steps[index];
        phase.status = StepStatus::kFailed;
        phase.awaiting_retry = false;
        if (phase.phase == Phase::kCompensation) {
            CompensateReady();  // the others go on; the saga parks when nothing else can
            return;
        }
        switch (step.kind) {
            case StepKind::kCompensatable:
                phase.outcome_unknown = true;  // it may have taken effect: undo it too
                Compensate();
                return;
            case StepKind::kPivot:
                Finish(SagaStatus::kFailed,
                       "the pivot '" + step.name + "' gave no definite answer after " + std::to_string(phase.attempt) +
                           " attempts; an operator must decide whether it took effect");
                return;
            case StepKind::kRetriable:
                Advance();  // the branches beside it go on; the saga parks when nothing else can
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
            if (state->status == StepStatus::kSkipped) {
                Ignore("step '" + step_name + "' was skipped (its condition was false) and never dispatched");
            } else if (state->cancelled) {
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
        S().status = SagaStatus::kRunning;
        S().current_step = 0;
        Advance();
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
                Compensate();
                return;
            case Outcome::kSuccess:
                phase->status = StepStatus::kSucceeded;
                phase->awaiting_retry = false;
                phase->reply = reply.data;
                break;
        }
        if (reply.phase == Phase::kCompensation) {
            CompensateReady();
            return;
        }
        const nlohmann::json saved = RenderTemplate(step.save, {{"reply", reply.data}});
        for (const auto& [key, value] : saved.items()) S().data[key] = value;
        Advance();
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
        // The first pivot or retriable step that was reached is the point of no return.
        for (std::size_t i = 0; i < def_.steps.size(); ++i) {
            const auto& step = def_.steps[i];
            const StepPhaseState* action = Action(i);
            if (step.kind == StepKind::kCompensatable || action == nullptr || action->status == StepStatus::kSkipped) {
                continue;
            }
            Ignore("step '" + step.name + "' is " + (step.kind == StepKind::kPivot ? "the pivot" : "retriable") +
                   (action->status == StepStatus::kDispatched ? " and in flight" : " and has succeeded") +
                   ": the saga is past its point of no return and can only complete");
            return;
        }
        if (!InFlight(Phase::kAction)) {
            Ignore("step '" + def_.steps[S().current_step].name + "' is not in flight");
            return;
        }
        Compensate();
    }

    const SagaDefinition& def_;
    const StepGraph graph_;
    const nlohmann::json& input_;
    Decision decision_;
};

}  // namespace

Decision Decide(const SagaDefinition& definition,
                const SagaState& state,
                const Event& event,
                const nlohmann::json& input) {
    return Machine(definition, state, input).Run(event);
}

Decision Decide(const SagaDefinition& definition, const SagaState& state, const Event& event) {
    static const nlohmann::json kNoInput = nlohmann::json::object();
    return Machine(definition, state, kNoInput).Run(event);
}

}  // namespace sagaflow::machine
