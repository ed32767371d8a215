#pragma once
// What a saga can do when things go wrong, found by driving the pure machine (saga_machine.hpp)
// through every sequence of events up to a bound: each in-flight phase's reply (success, failure,
// retry), its timeout, the retry falling due, duplicate and late replies, stale timeouts, a cancel
// and the saga's deadline at any point. States are deduplicated (the state holds the phases in
// dispatch order, so it holds the history the properties need) and explored breadth first, so the
// sequence reported for a violation is a shortest one.
//
// Checked after every event:
//   live           a saga that has not ended has a phase in flight (a deadline or a retry timer);
//   one-id         a step phase is dispatched once: a resend is the same phase (same event id);
//   quiet-ignore   an event the machine ignores sends nothing and changes nothing;
//   undo-order     a step is compensated only after every step that waited for it (directly or
//                  not) is settled: never ran, skipped, definitely failed, or compensated — no
//                  branch still in flight; independent branches' compensations may go side by side;
//   undo-effect    a compensation runs only for an action that took effect or may have (a null
//                  compensation at the participant otherwise), never for one not dispatched or
//                  skipped;
//   no-action-after-undo  no action is sent after its step's compensation;
//   pivot          when a pivot or retriable step runs every compensatable step is done, and once
//                  the pivot succeeded nothing is compensated;
//   all-undone     a saga that ends compensated has compensated every step that took effect;
//   undo-unknown   an action whose last attempt timed out (it may have taken effect) is compensated;
//   settled        a saga that has ended has nothing in flight.
// (A step phase is dispatched once by one-id, so "compensated exactly once" is one-id with
// all-undone.)
//
// A step's `when:` is decided once; every combination of the conditions' outcomes (up to eight
// conditional steps) is explored, and a sequence starts with the outcomes it assumes
// ("assume insure skipped").
// Pure: no I/O. `sagaflow explore FILE` prints the report.

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/definition.hpp"
#include "core/saga_machine.hpp"

namespace sagaflow::explore {

// The machine under test (machine::Decide; tests pass broken variants).
using Decider =
    std::function<machine::Decision(const SagaDefinition&, const machine::SagaState&, const machine::Event&)>;
// machine::Decide, the machine as it runs.
Decider MachineDecider();

struct Options {
    // The most events on a path after Begin; 0: enough for every phase of every step to see two
    // faults (DefaultDepth).
    int depth = 0;
    std::size_t max_states = 2'000'000;  // a bound on memory; `truncated` says when it was hit
};

// Enough events for every step phase to fail or time out twice (each followed by its retry) and
// then answer, plus a cancel.
int DefaultDepth(const SagaDefinition& definition);

// One event as text, e.g. "reply charge-payment action #2 failure", "timeout create-order action #1",
// "retry-due charge-payment compensation #2", "cancel", "deadline", "begin". ParseEvent reads it back.
std::string ToText(const machine::Event& event);
std::optional<machine::Event> ParseEvent(const std::string& text);

struct Violation {
    std::string property;             // live, one-id, quiet-ignore, undo-once, ...
    std::string detail;               // what happened, in words
    std::vector<std::string> events;  // a shortest sequence that shows it, "begin" first
};

struct Report {
    std::string saga;
    int version = 0;
    int depth = 0;
    std::size_t states = 0;       // distinct states reached
    std::size_t transitions = 0;  // events tried
    bool truncated = false;       // max_states was reached: not everything within depth was seen
    // How each reachable end state looks ("completed", "compensated: undid charge-payment,
    // create-order", "failed: ...") -> how many distinct end states look so.
    std::map<std::string, std::size_t> end_states;
    std::size_t open_at_depth = 0;            // states still open when the depth bound stopped the search
    std::vector<std::string> longest;         // the longest event sequence to an end state
    std::map<std::string, int> max_commands;  // "step/phase" -> most commands sent for it on any path
    std::vector<Violation> violations;        // one per property, the first found (shortest)

    bool Ok() const { return violations.empty(); }
    nlohmann::json Json() const;
    std::string Text() const;
};

Report Explore(const SagaDefinition& definition, const Options& options = {}, const Decider& decide = MachineDecider());

// Replays `events` (texts as ToText writes them) from a new saga and returns the properties the
// last event broke (empty: none) — a violation's sequence as a unit test.
std::vector<std::string> Replay(const SagaDefinition& definition,
                                const std::vector<std::string>& events,
                                const Decider& decide = MachineDecider());

}  // namespace sagaflow::explore
