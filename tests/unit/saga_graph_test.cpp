// The machine on a graph of steps: forks, joins, conditions, a branch failing beside another in
// flight, cancels and deadlines with branches in flight, and the order of compensations.
#include <doctest/doctest.h>

#include <algorithm>

#include "core/definition_loader.hpp"
#include "core/saga_machine.hpp"
#include "core/step_graph.hpp"

using namespace sagaflow::machine;
using sagaflow::SagaDefinition;

namespace {

SagaDefinition Loaded(const char* yaml, const char* file) {
    auto result = sagaflow::LoadDefinitionString(yaml, file);
    for (const auto& d : result.diagnostics) FAIL(d.ToString());
    REQUIRE(result.definition);
    return *result.definition;
}

// hotel and flight start together (insure too, when asked), charge joins them, then two
// confirmations side by side and the itinerary after both.
const SagaDefinition& Trip() {
    static const SagaDefinition definition = Loaded(R"(
saga: trip
version: 1
input:
  insurance: {type: boolean, default: false}
defaults: {retry: {maxAttempts: 2}, compensationRetry: {maxAttempts: 2}}
steps:
  - {name: hotel, participant: hotel, kind: compensatable, command: Hold, compensation: Release}
  - {name: flight, after: [], participant: air, kind: compensatable, command: Hold, compensation: Release}
  - name: insure
    after: []
    when: {path: $.input.insurance, equals: true}
    participant: ins
    kind: compensatable
    command: Buy
    compensation: Cancel
  - {name: charge, after: [hotel, flight, insure], participant: pay, kind: pivot, command: Charge}
  - {name: confirm-hotel, participant: hotel, kind: retriable, command: Confirm}
  - {name: confirm-flight, after: [charge], participant: air, kind: retriable, command: Confirm}
  - {name: itinerary, after: [confirm-hotel, confirm-flight], participant: mail, kind: retriable, command: Send}
)",
                                                    "trip.yaml");
    return definition;
}

// a -> b -> d and a -> c (c beside b and d): compensations run after every dependant's.
const SagaDefinition& Diamond() {
    static const SagaDefinition definition = Loaded(R"(
saga: diamond
version: 1
defaults: {retry: {maxAttempts: 2}, compensationRetry: {maxAttempts: 2}}
steps:
  - {name: a, participant: p, kind: compensatable, command: A, compensation: UndoA}
  - {name: b, participant: p, kind: compensatable, command: B, compensation: UndoB}
  - {name: c, after: [a], participant: p, kind: compensatable, command: C, compensation: UndoC}
  - {name: d, after: [b], participant: p, kind: compensatable, command: D, compensation: UndoD}
  - {name: e, after: [c, d], participant: p, kind: pivot, command: E}
)",
                                                    "diamond.yaml");
    return definition;
}

struct Run {
    const SagaDefinition& definition;
    nlohmann::json input = nlohmann::json::object();
    SagaState state = {};
    Decision last = {};

    Decision& operator()(const Event& event) {
        last = Decide(definition, state, event, input);
        state = last.state;
        return last;
    }
};

Reply Ok(const std::string& step) {
    return Reply{step, Phase::kAction, 1, Outcome::kSuccess, nlohmann::json::object()};
}
Reply Fail(const std::string& step) {
    return Reply{step, Phase::kAction, 1, Outcome::kFailure, {}};
}
Reply UndoOk(const std::string& step) {
    return Reply{step, Phase::kCompensation, 1, Outcome::kSuccess, {}};
}

// "hotel/action", "flight/compensation", ... for each Dispatch, sorted.
std::vector<std::string> Dispatched(const Decision& d) {
    std::vector<std::string> out;
    for (const auto& command : d.commands) {
        if (const auto* dispatch = std::get_if<Dispatch>(&command)) {
            out.push_back(dispatch->step_name + "/" + std::string(ToString(dispatch->phase)));
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

using Names = std::vector<std::string>;

}  // namespace

TEST_CASE("fork: the steps that wait for nothing start together; a false condition skips its step") {
    Run run{Trip(), nlohmann::json::object()};
    const auto& begun = run(Begin{});
    CHECK(Dispatched(begun) == Names{"flight/action", "hotel/action"});
    REQUIRE(begun.commands.size() == 3);
    const auto* skip = std::get_if<Skip>(&begun.commands[2]);  // in the steps' order
    REQUIRE(skip != nullptr);
    CHECK(skip->step_name == "insure");
    CHECK(skip->reason == "$.input.insurance equals true is false: $.input.insurance is absent");
    CHECK(StatusOf(*run.state.Find("insure", Phase::kAction)) == StepPhaseStatus::kSkipped);
    CHECK(run.state.current_step == 2);
    // A reply for the skipped step is ignored with the reason.
    CHECK(run(Ok("insure")).ignored == "step 'insure' was skipped (its condition was false) and never dispatched");
}

TEST_CASE("a true condition runs its step beside the others") {
    Run run{Trip(), {{"insurance", true}}};
    CHECK(Dispatched(run(Begin{})) == Names{"flight/action", "hotel/action", "insure/action"});
}

TEST_CASE("join: the pivot waits for every branch, then the confirmations run side by side, then the end") {
    Run run{Trip(), nlohmann::json::object()};
    run(Begin{});
    CHECK(Dispatched(run(Ok("flight"))).empty());  // hotel still in flight
    CHECK(run.state.status == SagaStatus::kRunning);
    CHECK(Dispatched(run(Ok("hotel"))) == Names{"charge/action"});  // insure skipped counts as done
    CHECK(Dispatched(run(Ok("charge"))) == Names{"confirm-flight/action", "confirm-hotel/action"});
    CHECK(Dispatched(run(Ok("confirm-flight"))).empty());
    CHECK(Dispatched(run(Ok("confirm-hotel"))) == Names{"itinerary/action"});
    const auto& end = run(Ok("itinerary"));
    REQUIRE(end.commands.size() == 1);
    CHECK(std::get<Finish>(end.commands[0]).status == SagaStatus::kCompleted);
}

TEST_CASE("a branch that fails stops its sibling in flight, which is compensated first") {
    Run run{Trip(), {{"insurance", true}}};
    run(Begin{});
    run(Ok("insure"));
    // The hotel refuses while the flight hold is in flight: the flight is stopped (its outcome is
    // unknown, so it is compensated: the airline records a null compensation if it has not seen the
    // hold) and the insurance, which took effect, is compensated beside it.
    const auto& failed = run(Fail("hotel"));
    CHECK(Dispatched(failed) == Names{"flight/compensation", "insure/compensation"});
    CHECK(run.state.status == SagaStatus::kCompensating);
    CHECK(StatusOf(*run.state.Find("flight", Phase::kAction)) == StepPhaseStatus::kCancelled);
    CHECK(run.state.Find("hotel", Phase::kCompensation) == nullptr);  // definitely no effect
    // The flight's late reply changes nothing.
    CHECK(run(Ok("flight")).ignored.has_value());
    CHECK(Dispatched(run(UndoOk("flight"))).empty());
    const auto& end = run(UndoOk("insure"));
    REQUIRE(end.commands.size() == 1);
    CHECK(std::get<Finish>(end.commands[0]).status == SagaStatus::kCompensated);
}

TEST_CASE("a branch whose attempts run out is compensated with its siblings") {
    Run run{Trip(), nlohmann::json::object()};
    run(Begin{});
    run(Ok("hotel"));
    run(Timeout{"flight", Phase::kAction, 1});
    run(RetryDue{"flight", Phase::kAction, 2});
    CHECK(Dispatched(run(Timeout{"flight", Phase::kAction, 2})) == Names{"flight/compensation", "hotel/compensation"});
    CHECK(StatusOf(*run.state.Find("flight", Phase::kAction)) == StepPhaseStatus::kTimedOut);
}

TEST_CASE("a cancel with two branches in flight stops both and compensates both") {
    Run run{Trip(), {{"insurance", true}}};
    run(Begin{});
    run(Ok("insure"));
    const auto& cancelled = run(Cancel{"the traveller changed plans"});
    CHECK(!cancelled.ignored);
    CHECK(Dispatched(cancelled) == Names{"flight/compensation", "hotel/compensation", "insure/compensation"});
    CHECK(StatusOf(*run.state.Find("hotel", Phase::kAction)) == StepPhaseStatus::kCancelled);
    CHECK(StatusOf(*run.state.Find("flight", Phase::kAction)) == StepPhaseStatus::kCancelled);
    CHECK(run(Cancel{"again"}).ignored == "the saga is already compensating");
}

TEST_CASE("a deadline with both holds in flight calls the saga off; past the pivot it cannot") {
    // The engine turns a passed deadline into a Cancel.
    Run run{Trip(), nlohmann::json::object()};
    run(Begin{});
    CHECK(Dispatched(run(Cancel{"deadline"})) == Names{"flight/compensation", "hotel/compensation"});
    Run late{Trip(), nlohmann::json::object()};
    late(Begin{});
    late(Ok("hotel"));
    late(Ok("flight"));
    CHECK(late(Cancel{"deadline"}).ignored ==
          "step 'charge' is the pivot and in flight: the saga is past its point of no return and can only complete");
}

TEST_CASE("compensations go in reverse dependency order, independent branches side by side") {
    Run run{Diamond(), nlohmann::json::object()};
    CHECK(Dispatched(run(Begin{})) == Names{"a/action"});
    CHECK(Dispatched(run(Ok("a"))) == Names{"b/action", "c/action"});
    CHECK(Dispatched(run(Ok("b"))) == Names{"d/action"});
    CHECK(Dispatched(run(Ok("c"))).empty());
    // d fails: c and b are undone side by side (neither waits for the other); a only after both.
    CHECK(Dispatched(run(Fail("d"))) == Names{"b/compensation", "c/compensation"});
    CHECK(Dispatched(run(UndoOk("b"))).empty());
    CHECK(Dispatched(run(UndoOk("c"))) == Names{"a/compensation"});
    CHECK(std::get<Finish>(run(UndoOk("a")).commands.at(0)).status == SagaStatus::kCompensated);
}

TEST_CASE("a compensation that gives up parks the saga once the others have settled") {
    Run run{Diamond(), nlohmann::json::object()};
    run(Begin{});
    run(Ok("a"));
    run(Ok("b"));
    run(Ok("c"));
    run(Fail("d"));  // b and c compensating
    run(Timeout{"b", Phase::kCompensation, 1});
    run(RetryDue{"b", Phase::kCompensation, 2});
    // b's compensation is out of attempts while c's is in flight: the saga waits for c.
    CHECK(run(Timeout{"b", Phase::kCompensation, 2}).commands.empty());
    CHECK(run.state.status == SagaStatus::kCompensating);
    // c is undone; a waits for b, which gave up: parked.
    const auto& parked = run(UndoOk("c"));
    REQUIRE(parked.commands.size() == 1);
    CHECK(std::get<Finish>(parked.commands[0]).status == SagaStatus::kFailed);
    CHECK(run.state.parked_reason ==
          "compensation of step 'b' did not succeed after 2 attempts; an operator must resolve it and retry the saga");
    CHECK(run.state.Find("a", Phase::kCompensation) == nullptr);
}

TEST_CASE("a retriable branch that gives up parks the saga once its sibling has settled") {
    Run run{Trip(), nlohmann::json::object()};
    run(Begin{});
    run(Ok("hotel"));
    run(Ok("flight"));
    run(Ok("charge"));
    run(Timeout{"confirm-hotel", Phase::kAction, 1});
    run(RetryDue{"confirm-hotel", Phase::kAction, 2});
    CHECK(run(Timeout{"confirm-hotel", Phase::kAction, 2}).commands.empty());  // confirm-flight in flight
    CHECK(run.state.status == SagaStatus::kRunning);
    const auto& parked = run(Ok("confirm-flight"));
    REQUIRE(parked.commands.size() == 1);
    CHECK(std::get<Finish>(parked.commands[0]).status == SagaStatus::kFailed);
    CHECK(run.state.parked_reason ==
          "retriable step 'confirm-hotel' did not succeed after 2 attempts; an operator must resolve it and retry "
          "the saga");
}

TEST_CASE("a condition on an earlier reply decides when its step becomes ready") {
    auto result = sagaflow::LoadDefinitionString(R"(
saga: gift
version: 1
steps:
  - {name: order, participant: o, kind: compensatable, command: Order, compensation: Cancel, save: {total: $.reply.total}}
  - name: wrap
    when: {all: [{path: $.data.total, greaterThan: "50.00"}, {not: {path: $.steps.order.reply.express, equals: true}}]}
    participant: w
    kind: compensatable
    command: Wrap
    compensation: Unwrap
  - {name: ship, participant: s, kind: pivot, command: Ship}
)",
                                                 "gift.yaml");
    for (const auto& d : result.diagnostics) FAIL(d.ToString());
    REQUIRE(result.definition);
    Run big{*result.definition, nlohmann::json::object()};
    big(Begin{});
    CHECK(Dispatched(big(Reply{"order", Phase::kAction, 1, Outcome::kSuccess, {{"total", "80.00"}}})) ==
          Names{"wrap/action"});
    Run small{*result.definition, nlohmann::json::object()};
    small(Begin{});
    const auto& skipped = small(Reply{"order", Phase::kAction, 1, Outcome::kSuccess, {{"total", "20.00"}}});
    CHECK(Dispatched(skipped) == Names{"ship/action"});
    CHECK(std::get<Skip>(skipped.commands[0]).reason ==
          "$.data.total greaterThan \"50.00\" and (not ($.steps.order.reply.express equals true)) is false: "
          "$.data.total was \"20.00\", $.steps.order.reply.express is absent");
    // Skipped steps are never compensated.
    small(Fail("ship"));
    CHECK(small.state.Find("wrap", Phase::kCompensation) == nullptr);
}

TEST_CASE("the step graph: parents, order, concurrency, cycles") {
    const sagaflow::StepGraph graph(Diamond());
    CHECK(graph.Parents(2) == std::vector<std::size_t>{0});
    CHECK(graph.Before(0, 3));
    CHECK(graph.Concurrent(2, 3));
    CHECK(!graph.Linear());
    CHECK(graph.Cycle().empty());
    SagaDefinition looped = Diamond();
    looped.steps[0].after = std::vector<std::string>{"e"};
    const sagaflow::StepGraph cycle(looped);
    CHECK(!cycle.Cycle().empty());
}
