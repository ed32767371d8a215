#include "core/explore.hpp"

#include <algorithm>
#include <deque>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/step_graph.hpp"

namespace sagaflow::explore {
namespace {

using machine::Cancel;
using machine::Decision;
using machine::Event;
using machine::Phase;
using machine::Reply;
using machine::RetryDue;
using machine::SagaState;
using machine::SagaStatus;
using machine::StepPhaseState;
using machine::StepStatus;
using machine::Timeout;

constexpr const char* kDeadline = "deadline";

bool Terminal(SagaStatus status) {
    return status == SagaStatus::kCompleted || status == SagaStatus::kCompensated || status == SagaStatus::kFailed;
}

// What decides the machine's future: the data and replies only fill command payloads, and the
// order in which parallel branches were dispatched changes nothing the machine does next, so two
// interleavings that reach the same phases are one state.
std::string Key(const SagaState& s) {
    std::vector<std::string> phases;
    for (const auto& p : s.phases) {
        // An answered phase's attempt count only shows in texts (why a saga parked): not its future.
        const bool open = p.status == StepStatus::kDispatched;
        phases.push_back(p.step_name + (p.phase == Phase::kAction ? ":a" : ":c") +
                         std::to_string(static_cast<int>(p.status)) + "#" + (open ? std::to_string(p.attempt) : "") +
                         (p.awaiting_retry ? "r" : "") + (p.outcome_unknown ? "u" : "") + (p.cancelled ? "x" : ""));
    }
    std::sort(phases.begin(), phases.end());
    std::string key = std::string(machine::ToString(s.status)) + "|" + std::to_string(s.current_step);
    for (const auto& p : phases) key += "|" + p;
    return key;
}

bool TookEffect(const StepPhaseState* action) {
    return action != nullptr && (action->status == StepStatus::kSucceeded || action->outcome_unknown);
}

// The step's position in the definition (SagaDefinition::FindStep's step).
std::optional<std::size_t> IndexOf(const SagaDefinition& d, const std::string& name) {
    const StepDefinition* step = d.FindStep(name);
    if (step == nullptr) return std::nullopt;
    return static_cast<std::size_t>(step - d.steps.data());
}

// A reply whose fields fill every `save` path of the step ("$.reply.a.b" gets "<step>.a.b").
nlohmann::json SampleReply(const StepDefinition& step) {
    nlohmann::json reply = nlohmann::json::object();
    if (!step.save.is_object()) return reply;
    for (const auto& [key, path] : step.save.items()) {
        if (!path.is_string()) continue;
        const auto& text = path.get_ref<const std::string&>();
        if (text.rfind("$.reply.", 0) != 0) continue;
        nlohmann::json* at = &reply;
        std::istringstream segments(text.substr(8));
        std::vector<std::string> parts;
        for (std::string part; std::getline(segments, part, '.');) parts.push_back(part);
        for (std::size_t i = 0; i < parts.size(); ++i) {
            if (!at->is_object()) break;
            if (i + 1 == parts.size()) {
                (*at)[parts[i]] = step.name + "." + text.substr(8);
            } else {
                at = &(*at)[parts[i]];
                if (at->is_null()) *at = nlohmann::json::object();
            }
        }
    }
    return reply;
}

std::string PhaseText(Phase phase) {
    return std::string(machine::ToString(phase));
}

std::string OutcomeText(machine::Outcome outcome) {
    switch (outcome) {
        case machine::Outcome::kSuccess:
            return "success";
        case machine::Outcome::kFailure:
            return "failure";
        case machine::Outcome::kRetry:
            return "retry";
    }
    return "?";
}

using Finding = std::pair<std::string, std::string>;  // property, detail

// The properties one transition P --event--> D must keep.
std::vector<Finding> Check(const SagaDefinition& d,
                           const SagaState& before,
                           const Event& event,
                           const Decision& decision) {
    std::vector<Finding> found;
    const SagaState& after = decision.state;
    // undo-unknown: an action whose last attempt timed out may have taken effect; it is compensated.
    if (const auto* timeout = std::get_if<Timeout>(&event);
        timeout != nullptr && !decision.ignored && timeout->phase == Phase::kAction) {
        const auto index = IndexOf(d, timeout->step_name);
        const auto* p = after.Find(timeout->step_name, Phase::kAction);
        if (index && d.steps[*index].compensation && p != nullptr && p->status == StepStatus::kFailed &&
            (!p->outcome_unknown || after.Find(timeout->step_name, Phase::kCompensation) == nullptr)) {
            found.emplace_back("undo-unknown",
                               "the action of step '" + timeout->step_name +
                                   "' timed out on its last attempt (it may have taken effect) but is not compensated");
        }
    }
    if (decision.ignored) {
        if (!decision.commands.empty() || Key(after) != Key(before)) {
            found.emplace_back(
                "quiet-ignore",
                "an event the machine ignored (" + *decision.ignored + ") still sent commands or changed the saga");
        }
        return found;
    }
    // one-id: each (step, phase) once; attempt 1 creates a phase, a later attempt resends one.
    std::set<std::pair<std::string, Phase>> seen;
    for (const auto& p : after.phases) {
        if (!seen.insert({p.step_name, p.phase}).second) {
            found.emplace_back("one-id",
                               "the " + PhaseText(p.phase) + " of step '" + p.step_name +
                                   "' was dispatched as a second step phase, with a new event id");
        }
    }
    for (const auto& command : decision.commands) {
        const auto* dispatch = std::get_if<machine::Dispatch>(&command);
        if (dispatch == nullptr) continue;
        const bool existed = before.Find(dispatch->step_name, dispatch->phase) != nullptr;
        if (dispatch->attempt == 1 && existed) {
            found.emplace_back("one-id",
                               "the " + PhaseText(dispatch->phase) + " of step '" + dispatch->step_name +
                                   "' was sent again as a new command (attempt 1), not as a resend of the same event");
        }
        if (dispatch->attempt > 1 && !existed) {
            found.emplace_back("one-id",
                               "a resend (attempt " + std::to_string(dispatch->attempt) + ") of the " +
                                   PhaseText(dispatch->phase) + " of step '" + dispatch->step_name +
                                   "', which was never dispatched");
        }
        if (dispatch->phase == Phase::kAction && after.Find(dispatch->step_name, Phase::kCompensation) != nullptr) {
            found.emplace_back("no-action-after-undo",
                               "the action of step '" + dispatch->step_name + "' was sent after its compensation");
        }
    }
    // Positions in dispatch order.
    std::map<std::pair<std::string, Phase>, std::size_t> at;
    for (std::size_t i = 0; i < after.phases.size(); ++i)
        at.emplace(std::pair{after.phases[i].step_name, after.phases[i].phase}, i);
    const StepGraph graph(d);
    for (std::size_t i = 0; i < after.phases.size(); ++i) {
        const auto& p = after.phases[i];
        const auto index = IndexOf(d, p.step_name);
        if (!index) {
            found.emplace_back("one-id", "a phase of step '" + p.step_name + "', which the definition does not have");
            continue;
        }
        if (p.phase == Phase::kCompensation) {
            const auto action = at.find({p.step_name, Phase::kAction});
            if (action == at.end() || action->second > i) {
                found.emplace_back("undo-effect",
                                   "step '" + p.step_name + "' was compensated although its action was never sent");
            } else {
                const auto& a = after.phases[action->second];
                if (a.status == StepStatus::kSkipped) {
                    found.emplace_back("undo-effect",
                                       "step '" + p.step_name + "' was compensated although it was skipped");
                } else if (a.status != StepStatus::kSucceeded && !a.outcome_unknown) {
                    found.emplace_back("undo-effect",
                                       "step '" + p.step_name +
                                           "' was compensated although its action definitely did not take effect");
                }
            }
        } else if (const auto undo = at.find({p.step_name, Phase::kCompensation});
                   undo != at.end() && undo->second < i) {
            found.emplace_back("no-action-after-undo",
                               "the action of step '" + p.step_name + "' was sent after its compensation");
        }
    }
    // undo-order: a compensation goes out only when every step that waited for its step (directly or
    // not) is settled: never ran, skipped, definitely failed, or compensated. No branch is in flight.
    for (const auto& command : decision.commands) {
        const auto* dispatch = std::get_if<machine::Dispatch>(&command);
        if (dispatch == nullptr || dispatch->phase != Phase::kCompensation || dispatch->attempt != 1) continue;
        const auto j = IndexOf(d, dispatch->step_name);
        if (!j) continue;
        for (std::size_t k = 0; k < d.steps.size(); ++k) {
            if (!graph.Before(*j, k)) continue;
            const auto* action = after.Find(d.steps[k].name, Phase::kAction);
            const auto* undo = after.Find(d.steps[k].name, Phase::kCompensation);
            if (action != nullptr && action->status == StepStatus::kDispatched) {
                found.emplace_back("undo-order",
                                   "step '" + dispatch->step_name + "' was compensated while step '" + d.steps[k].name +
                                       "', which waited for it, was still in flight");
            } else if (d.steps[k].compensation && TookEffect(action) &&
                       (undo == nullptr || undo->status != StepStatus::kSucceeded)) {
                found.emplace_back("undo-order",
                                   "step '" + dispatch->step_name + "' was compensated before step '" +
                                       d.steps[k].name + "', which waited for it, was compensated");
            }
        }
    }
    // pivot: once a pivot or retriable step runs, every compensatable step is done (succeeded or
    // skipped: none in flight, none to come), and once the pivot succeeded nothing is compensated.
    for (std::size_t i = 0; i < d.steps.size(); ++i) {
        if (d.steps[i].kind == StepKind::kCompensatable) continue;
        const auto* p = after.Find(d.steps[i].name, Phase::kAction);
        if (p == nullptr || p->status == StepStatus::kSkipped) continue;
        for (const auto& step : d.steps) {
            if (step.kind != StepKind::kCompensatable) continue;
            const auto* q = after.Find(step.name, Phase::kAction);
            if (q != nullptr && (q->status == StepStatus::kSucceeded || q->status == StepStatus::kSkipped)) continue;
            found.emplace_back("pivot",
                               "compensatable step '" + step.name + "' " +
                                   (q == nullptr ? "had not run" : "was not done") + " when step '" + d.steps[i].name +
                                   "', past the point of no return, ran");
            break;
        }
        if (d.steps[i].kind == StepKind::kPivot && p->status == StepStatus::kSucceeded &&
            (after.status == SagaStatus::kCompensating || after.status == SagaStatus::kCompensated ||
             std::any_of(after.phases.begin(), after.phases.end(), [](const auto& q) {
                 return q.phase == Phase::kCompensation;
             }))) {
            found.emplace_back("pivot", "the saga compensates after its pivot '" + d.steps[i].name + "' succeeded");
        }
    }
    // settled: an ended saga has nothing in flight.
    if (Terminal(after.status)) {
        for (const auto& p : after.phases) {
            if (p.status != StepStatus::kDispatched) continue;
            found.emplace_back("settled",
                               "the saga ended " + std::string(machine::ToString(after.status)) + " with the " +
                                   PhaseText(p.phase) + " of step '" + p.step_name + "' still in flight");
            break;
        }
    }
    // live: an open saga waits for something that will come.
    if (!Terminal(after.status)) {
        const bool waiting = std::any_of(after.phases.begin(), after.phases.end(), [](const auto& p) {
            return p.status == StepStatus::kDispatched;
        });
        if (!waiting) {
            found.emplace_back("live",
                               "the saga is " + std::string(machine::ToString(after.status)) +
                                   " with no phase in flight: no reply, timeout or retry will move it");
        }
    }
    // all-undone: an end as compensated undid every step that took effect or may have.
    if (after.status == SagaStatus::kCompensated) {
        for (const auto& step : d.steps) {
            if (!step.compensation) continue;
            if (!TookEffect(after.Find(step.name, Phase::kAction))) continue;
            const auto* undo = after.Find(step.name, Phase::kCompensation);
            if (undo == nullptr || undo->status != StepStatus::kSucceeded) {
                found.emplace_back("all-undone",
                                   "the saga ended compensated but step '" + step.name +
                                       "', whose action took effect or may have, was not compensated");
            }
        }
    }
    return found;
}

// The events worth trying in a state (an ended saga gets none: nothing reaches it any more).
std::vector<Event> Candidates(const SagaDefinition& d, const SagaState& s) {
    std::vector<Event> events;
    if (Terminal(s.status)) return events;
    for (const auto& p : s.phases) {
        const auto index = IndexOf(d, p.step_name);
        if (!index) continue;
        const auto& step = d.steps[*index];
        const auto reply = [&](int attempt, machine::Outcome outcome) {
            events.emplace_back(Reply{p.step_name,
                                      p.phase,
                                      attempt,
                                      outcome,
                                      outcome == machine::Outcome::kSuccess && p.phase == Phase::kAction
                                          ? SampleReply(step)
                                          : nlohmann::json::object()});
        };
        if (p.status != StepStatus::kDispatched) {  // duplicates of an answered phase
            reply(p.attempt, machine::Outcome::kSuccess);
            reply(p.attempt, machine::Outcome::kFailure);
            continue;
        }
        for (const auto outcome : {machine::Outcome::kSuccess, machine::Outcome::kFailure, machine::Outcome::kRetry}) {
            reply(p.attempt, outcome);
        }
        reply(p.attempt + 1, machine::Outcome::kSuccess);  // an attempt not sent yet: not ours
        if (p.awaiting_retry) {
            events.emplace_back(RetryDue{p.step_name, p.phase, p.attempt + 1});
            events.emplace_back(Timeout{p.step_name, p.phase, p.attempt});  // stale: the retry replaced it
        } else {
            events.emplace_back(Timeout{p.step_name, p.phase, p.attempt});
            if (p.attempt > 1) {
                reply(p.attempt - 1, machine::Outcome::kSuccess);                   // late: answers the same command
                events.emplace_back(Timeout{p.step_name, p.phase, p.attempt - 1});  // stale
            }
        }
    }
    events.emplace_back(Cancel{"cancel"});
    if (d.deadline) events.emplace_back(Cancel{kDeadline});
    return events;
}

// The machine treats the attempts between the first and the last alike (only reaching the last
// changes what it does), so explore runs every retry policy with at most this many attempts: a path
// of twenty attempts is the same path with the middle ones left out, and parallel branches do not
// multiply twenty attempts each.
constexpr int kExploredAttempts = 3;

SagaDefinition WithFewerAttempts(const SagaDefinition& d) {
    SagaDefinition fewer = d;
    for (auto& step : fewer.steps) step.retry.max_attempts = std::min(step.retry.max_attempts, kExploredAttempts);
    fewer.compensation_retry.max_attempts = std::min(fewer.compensation_retry.max_attempts, kExploredAttempts);
    return fewer;
}

// The policy's real number of attempts for a phase explored with fewer.
int RealAttempts(const SagaDefinition& d, const std::string& step_name, Phase phase) {
    const StepDefinition* step = d.FindStep(step_name);
    if (step == nullptr) return 0;
    return phase == Phase::kAction ? step->retry.max_attempts : d.compensation_retry.max_attempts;
}

std::string EndLabelOf(const SagaState& s) {
    switch (s.status) {
        case SagaStatus::kCompleted:
            return "completed";
        case SagaStatus::kCompensated: {
            std::string undone;
            for (const auto& p : s.phases) {
                if (p.phase == Phase::kCompensation) undone += (undone.empty() ? "" : ", ") + p.step_name;
            }
            return "compensated: " + (undone.empty() ? std::string("nothing to undo") : "undid " + undone);
        }
        case SagaStatus::kFailed:
            return "failed (parked): " + s.parked_reason;
        default:
            return std::string(machine::ToString(s.status));
    }
}

std::string EndLabel(const SagaDefinition& original, const SagaState& s) {
    if (s.status == SagaStatus::kFailed) {
        // Said with the policy's real count of attempts.
        std::string reason = s.parked_reason;
        for (const auto& p : s.phases) {
            if (p.status != StepStatus::kFailed || p.outcome_unknown) continue;
            const std::string explored = " after " + std::to_string(p.attempt) + " attempts";
            const auto at = reason.find(explored);
            if (at == std::string::npos) continue;
            reason.replace(at,
                           explored.size(),
                           " after " + std::to_string(RealAttempts(original, p.step_name, p.phase)) + " attempts");
            break;
        }
        return "failed (parked): " + reason;
    }
    return EndLabelOf(s);
}

SagaState Begun(const SagaDefinition& d, const Decider& decide, Decision& first) {
    first = decide(d, SagaState{}, machine::Begin{});
    return first.state;
}

}  // namespace

int DefaultDepth(const SagaDefinition& definition) {
    int depth = 1;  // a cancel
    for (const auto& step : definition.steps) depth += step.compensation ? 10 : 5;
    return depth;
}

std::string ToText(const Event& event) {
    struct {
        std::string operator()(const machine::Begin&) const { return "begin"; }
        std::string operator()(const Reply& r) const {
            return "reply " + r.step_name + " " + PhaseText(r.phase) + " #" + std::to_string(r.attempt) + " " +
                   OutcomeText(r.outcome);
        }
        std::string operator()(const Timeout& t) const {
            return "timeout " + t.step_name + " " + PhaseText(t.phase) + " #" + std::to_string(t.attempt);
        }
        std::string operator()(const RetryDue& r) const {
            return "retry-due " + r.step_name + " " + PhaseText(r.phase) + " #" + std::to_string(r.attempt);
        }
        std::string operator()(const Cancel& c) const { return c.reason == kDeadline ? "deadline" : "cancel"; }
    } visitor;
    return std::visit(visitor, event);
}

std::optional<Event> ParseEvent(const std::string& text) {
    std::istringstream in(text);
    std::string kind, step, phase_text, attempt_text, outcome_text;
    in >> kind;
    if (kind == "begin") return machine::Begin{};
    if (kind == "cancel") return Cancel{"cancel"};
    if (kind == "deadline") return Cancel{kDeadline};
    in >> step >> phase_text >> attempt_text;
    const auto phase = machine::ParsePhase(phase_text);
    if (!phase || attempt_text.size() < 2 || attempt_text[0] != '#') return std::nullopt;
    int attempt = 0;
    try {
        attempt = std::stoi(attempt_text.substr(1));
    } catch (const std::exception&) {
        return std::nullopt;
    }
    if (kind == "timeout") return Timeout{step, *phase, attempt};
    if (kind == "retry-due") return RetryDue{step, *phase, attempt};
    if (kind != "reply") return std::nullopt;
    in >> outcome_text;
    for (const auto outcome : {machine::Outcome::kSuccess, machine::Outcome::kFailure, machine::Outcome::kRetry}) {
        if (OutcomeText(outcome) == outcome_text)
            return Reply{step, *phase, attempt, outcome, nlohmann::json::object()};
    }
    return std::nullopt;
}

Decider MachineDecider() {
    return [](const SagaDefinition& d, const SagaState& s, const Event& e) { return machine::Decide(d, s, e); };
}

namespace {

constexpr std::string_view kAssume = "assume ";

// The definition with each named step's condition fixed: true ("runs") or false ("skipped").
SagaDefinition WithConditions(const SagaDefinition& d, const std::map<std::string, bool>& values) {
    SagaDefinition fixed = d;
    for (auto& step : fixed.steps) {
        const auto it = values.find(step.name);
        if (!step.when || it == values.end()) continue;
        step.when = Condition{it->second ? Condition::Op::kAll : Condition::Op::kAny, {}, nullptr, {}};
    }
    return fixed;
}

// One exploration of `definition` (the original, fewer attempts and conditions fixed); `original`
// for the texts.
Report ExploreOne(const SagaDefinition& original,
                  const SagaDefinition& definition,
                  const Options& options,
                  const Decider& decide,
                  const std::vector<std::string>& assumptions) {
    Report report;
    report.saga = definition.name;
    report.version = definition.version;
    report.depth = options.depth > 0 ? options.depth : DefaultDepth(original);

    struct Node {
        SagaState state;
        int depth = 0;
        std::optional<std::size_t> parent;
        std::string event;                                      // the event from the parent
        std::vector<std::pair<std::string, std::size_t>> next;  // events that changed the state
        bool expanded = false;
    };
    std::vector<Node> nodes;
    std::unordered_map<std::string, std::size_t> index;
    const auto path = [&](std::size_t id) {
        std::vector<std::string> events;
        for (std::optional<std::size_t> at = id; at; at = nodes[*at].parent) events.push_back(nodes[*at].event);
        std::reverse(events.begin(), events.end());
        return events;
    };
    std::set<std::string> reported;
    const auto record = [&](const std::vector<Finding>& findings, std::vector<std::string> events) {
        events.insert(events.begin(), assumptions.begin(), assumptions.end());
        for (const auto& [property, detail] : findings) {
            if (!reported.insert(property).second) continue;
            report.violations.push_back({property, detail, events});
        }
    };

    Decision first;
    const SagaState root = Begun(definition, decide, first);
    record(Check(definition, SagaState{}, machine::Begin{}, first), {"begin"});
    nodes.push_back({root, 0, std::nullopt, "begin", {}, false});
    index.emplace(Key(root), 0);
    std::deque<std::size_t> queue{0};
    while (!queue.empty()) {
        const std::size_t id = queue.front();
        queue.pop_front();
        if (nodes[id].depth >= report.depth) {
            if (!Terminal(nodes[id].state.status)) ++report.open_at_depth;
            continue;
        }
        nodes[id].expanded = true;
        const SagaState state = nodes[id].state;  // nodes may grow below
        for (const auto& event : Candidates(definition, state)) {
            ++report.transitions;
            const Decision decision = decide(definition, state, event);
            const std::string text = ToText(event);
            const auto findings = Check(definition, state, event, decision);
            if (!findings.empty()) {
                auto events = path(id);
                events.push_back(text);
                record(findings, std::move(events));
            }
            if (decision.ignored) continue;
            const std::string key = Key(decision.state);
            auto [it, fresh] = index.emplace(key, nodes.size());
            if (fresh) {
                if (nodes.size() >= options.max_states) {
                    report.truncated = true;
                    index.erase(it);
                    continue;
                }
                nodes.push_back({decision.state, nodes[id].depth + 1, id, text, {}, false});
                queue.push_back(it->second);
            }
            if (it->second != id) nodes[id].next.emplace_back(text, it->second);
        }
    }
    report.states = nodes.size();

    // End states, and the most commands per step phase (every attempt of a phase is one command).
    std::set<std::string> ends;
    for (const auto& node : nodes) {
        if (Terminal(node.state.status) && ends.insert(Key(node.state)).second)
            ++report.end_states[EndLabel(original, node.state)];
        for (const auto& p : node.state.phases) {
            auto& most = report.max_commands[p.step_name + "/" + PhaseText(p.phase)];
            // The last explored attempt stands for the policy's last.
            const int real = RealAttempts(original, p.step_name, p.phase);
            most = std::max(most, p.attempt == kExploredAttempts && real > kExploredAttempts ? real : p.attempt);
        }
    }
    // The longest path to an end state (the state graph has no cycle: every change adds a phase,
    // an attempt or an answer).
    // -2: not visited, -3: on the stack (a broken machine could loop), -1: no end reachable.
    std::vector<int> longest(nodes.size(), -2);
    std::vector<std::optional<std::size_t>> via(nodes.size());
    std::vector<std::pair<std::size_t, std::size_t>> stack{{0, 0}};
    longest[0] = -3;
    while (!stack.empty()) {
        auto& [id, child] = stack.back();
        if (child == 0 && Terminal(nodes[id].state.status)) {
            longest[id] = 0;
            stack.pop_back();
            continue;
        }
        if (child < nodes[id].next.size()) {
            const std::size_t next = nodes[id].next[child].second;
            ++child;
            if (longest[next] == -2) {
                longest[next] = -3;
                stack.emplace_back(next, 0);
            }
            continue;
        }
        int best = -1;
        for (std::size_t k = 0; k < nodes[id].next.size(); ++k) {
            const int length = longest[nodes[id].next[k].second];
            if (length >= 0 && length + 1 > best) {
                best = length + 1;
                via[id] = k;
            }
        }
        longest[id] = best;
        stack.pop_back();
    }
    if (longest[0] >= 0) {
        report.longest = assumptions;
        report.longest.push_back("begin");
        for (std::size_t id = 0; via[id];) {
            const auto& [text, next] = nodes[id].next[*via[id]];
            report.longest.push_back(text);
            id = next;
        }
    }
    return report;
}

}  // namespace

Report Explore(const SagaDefinition& definition, const Options& options, const Decider& decide) {
    // Each condition is decided once, when its step becomes ready: every combination of outcomes is
    // explored as a definition whose conditions are fixed.
    std::vector<std::string> conditional;
    for (const auto& step : definition.steps) {
        if (step.when) conditional.push_back(step.name);
    }
    constexpr std::size_t kMaxConditional = 8;
    const std::size_t explored = std::min(conditional.size(), kMaxConditional);
    Report report;
    report.saga = definition.name;
    report.version = definition.version;
    report.truncated = conditional.size() > kMaxConditional;
    std::set<std::string> reported;
    for (std::size_t mask = 0; mask < (std::size_t{1} << explored); ++mask) {
        std::map<std::string, bool> values;
        std::vector<std::string> assumptions;
        std::string label;
        for (std::size_t k = 0; k < conditional.size(); ++k) {
            const bool runs = k >= explored || ((mask >> k) & 1U) == 0;
            values[conditional[k]] = runs;
            assumptions.push_back(std::string(kAssume) + conditional[k] + (runs ? " runs" : " skipped"));
            if (!runs) label += (label.empty() ? "" : ", ") + conditional[k];
        }
        const Report one =
            ExploreOne(definition, WithConditions(WithFewerAttempts(definition), values), options, decide, assumptions);
        report.depth = one.depth;
        report.states += one.states;
        report.transitions += one.transitions;
        report.truncated = report.truncated || one.truncated;
        report.open_at_depth += one.open_at_depth;
        for (const auto& [end, count] : one.end_states) {
            report.end_states[label.empty() ? end : "(skipped " + label + ") " + end] += count;
        }
        if (one.longest.size() > report.longest.size()) report.longest = one.longest;
        for (const auto& [phase, count] : one.max_commands) {
            report.max_commands[phase] = std::max(report.max_commands[phase], count);
        }
        for (const auto& v : one.violations) {
            if (reported.insert(v.property).second) report.violations.push_back(v);
        }
    }
    return report;
}

std::vector<std::string> Replay(const SagaDefinition& definition,
                                const std::vector<std::string>& events,
                                const Decider& decide) {
    std::set<std::string> broken;
    SagaState state;
    std::map<std::string, bool> values;
    for (const auto& text : events) {
        if (text.rfind(kAssume, 0) == 0) {  // "assume <step> runs|skipped", before "begin"
            std::istringstream in(text.substr(kAssume.size()));
            std::string step, outcome;
            in >> step >> outcome;
            values[step] = outcome == "runs";
            continue;
        }
    }
    const SagaDefinition fixed = WithConditions(WithFewerAttempts(definition), values);
    for (const auto& text : events) {
        if (text.rfind(kAssume, 0) == 0) continue;
        const auto event = ParseEvent(text);
        if (!event) {
            broken.insert("unreadable event: " + text);
            continue;
        }
        const Decision decision = decide(fixed, state, *event);
        for (const auto& [property, detail] : Check(fixed, state, *event, decision)) broken.insert(property);
        if (!decision.ignored) state = decision.state;
    }
    return {broken.begin(), broken.end()};
}

nlohmann::json Report::Json() const {
    nlohmann::json violations_json = nlohmann::json::array();
    for (const auto& v : violations) {
        violations_json.push_back({{"property", v.property}, {"detail", v.detail}, {"events", v.events}});
    }
    nlohmann::json ends = nlohmann::json::object();
    for (const auto& [label, count] : end_states) ends[label] = count;
    nlohmann::json commands = nlohmann::json::object();
    for (const auto& [phase, count] : max_commands) commands[phase] = count;
    return {{"saga", saga},
            {"version", version},
            {"depth", depth},
            {"states", states},
            {"transitions", transitions},
            {"truncated", truncated},
            {"openAtDepth", open_at_depth},
            {"endStates", ends},
            {"longestPath", longest},
            {"maxCommandsPerStepPhase", commands},
            {"violations", violations_json},
            {"ok", Ok()}};
}

std::string Report::Text() const {
    std::ostringstream out;
    out << "explore " << saga << " v" << version << ": depth " << depth << ", " << states << " states, " << transitions
        << " events tried" << (truncated ? " (TRUNCATED: state limit reached)" : "") << "\n";
    if (open_at_depth > 0) out << "  " << open_at_depth << " states still open at the depth bound\n";
    out << "end states (how many distinct histories end so: attempts and answers differ):\n";
    for (const auto& [label, count] : end_states) out << "  " << count << "  " << label << "\n";
    out << "longest path to an end among the states seen: " << (longest.empty() ? 0 : longest.size() - 1)
        << " events after begin\n";
    for (const auto& event : longest) out << "    " << event << "\n";
    out << "most commands per step phase (one event id each, resent):\n";
    for (const auto& [phase, count] : max_commands) out << "  " << phase << ": " << count << "\n";
    if (violations.empty()) {
        out << "violations: none\n";
    } else {
        for (const auto& v : violations) {
            out << "VIOLATION " << v.property << ": " << v.detail << "\n  shortest sequence:\n";
            for (const auto& event : v.events) out << "    " << event << "\n";
        }
    }
    return out.str();
}

}  // namespace sagaflow::explore
