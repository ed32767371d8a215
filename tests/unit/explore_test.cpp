// The failure-path explorer (core/explore.hpp): clean on the repository's sagas, and each broken
// machine or definition built here is caught with a shortest sequence that replays as a test.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

#include "core/definition_loader.hpp"
#include "core/explore.hpp"
#include "core/step_graph.hpp"

namespace explore = sagaflow::explore;
using sagaflow::SagaDefinition;
using sagaflow::StepKind;
namespace machine = sagaflow::machine;

namespace {

std::filesystem::path SourceDir() {
    const char* dir = std::getenv("SAGAFLOW_SOURCE_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "SAGAFLOW_SOURCE_DIR is not set: run this test through ctest");
    return dir;
}

SagaDefinition Load(const std::string& name) {
    auto result = sagaflow::LoadDefinitionFile(SourceDir() / "sagas" / name);
    REQUIRE(result.definition);
    return *result.definition;
}

const explore::Violation* Find(const explore::Report& report, const std::string& property) {
    for (const auto& v : report.violations) {
        if (v.property == property) return &v;
    }
    return nullptr;
}

std::string Joined(const std::vector<std::string>& events) {
    std::string out;
    for (const auto& e : events) out += (out.empty() ? "" : "; ") + e;
    return out;
}

}  // namespace

TEST_CASE("the repository's sagas keep every property on every path with two faults per step phase") {
    for (const auto& entry : std::filesystem::directory_iterator(SourceDir() / "sagas")) {
        if (entry.path().extension() != ".yaml") continue;
        CAPTURE(entry.path());
        const auto definition = Load(entry.path().filename().string());
        const auto report = explore::Explore(definition);
        INFO(report.Text());
        CHECK(report.Ok());
        CHECK(!report.truncated);
        CHECK(report.depth == explore::DefaultDepth(definition));
        CHECK(report.end_states.count("completed") == 1);
        // The first step failed. With several steps starting together, one failing stops the others
        // in flight, and those are compensated: nothing to undo never comes.
        const sagaflow::StepGraph graph(definition);
        std::size_t roots = 0;
        for (std::size_t i = 0; i < graph.Size(); ++i) roots += graph.Parents(i).empty() ? 1U : 0U;
        CHECK(report.end_states.count("compensated: nothing to undo") == (roots == 1 ? 1U : 0U));
        // Each step phase is sent once and resent with its event id: never more than its attempts.
        for (const auto& step : definition.steps) {
            CHECK(report.max_commands.at(step.name + "/action") <= step.retry.max_attempts);
        }
        CHECK(report.longest.size() > definition.steps.size());
        // Begins, after the outcomes of its conditions it assumes.
        const auto begin = std::find(report.longest.begin(), report.longest.end(), "begin");
        REQUIRE(begin != report.longest.end());
        for (auto it = report.longest.begin(); it != begin; ++it) CHECK(it->rfind("assume ", 0) == 0);
        CHECK(explore::Replay(definition, report.longest).empty());
    }
}

TEST_CASE("order-payment: its end states and the longest way there") {
    const auto report = explore::Explore(Load("order-payment.yaml"));
    INFO(report.Text());
    CHECK(report.end_states.count("compensated: undid create-order") == 1);
    CHECK(report.end_states.at("compensated: undid charge-payment, create-order") >= 1);  // timed-out charge
    // The shortest ends are reached: every event sequence of one step succeeding in order.
    const auto replayed = explore::Replay(Load("order-payment.yaml"), report.longest);
    CHECK(replayed.empty());
    // Text and JSON say the same.
    const auto json = report.Json();
    CHECK(json["ok"] == true);
    CHECK(json["states"] == report.states);
    CHECK(json["endStates"]["completed"] == report.end_states.at("completed"));
}

TEST_CASE("a step phase that runs out of attempts parks the saga, within a depth that allows it") {
    auto definition = Load("order-payment.yaml");
    definition.compensation_retry.max_attempts = 2;
    explore::Options options;
    options.depth = 8;
    const auto report = explore::Explore(definition, options);
    INFO(report.Text());
    CHECK(report.Ok());
    CHECK(report.end_states.count(
              "failed (parked): compensation of step 'create-order' did not succeed after 2 attempts; an operator "
              "must resolve it and retry the saga") == 1);
    CHECK(report.open_at_depth > 0);  // the bound cut paths short
}

TEST_CASE("every event's text reads back as the same event") {
    for (const std::string text : {"begin",
                                   "reply charge-payment action #2 failure",
                                   "reply create-order compensation #1 success",
                                   "reply x action #3 retry",
                                   "timeout create-order action #1",
                                   "retry-due charge-payment compensation #4",
                                   "cancel",
                                   "deadline"}) {
        const auto event = explore::ParseEvent(text);
        REQUIRE_MESSAGE(event, text);
        CHECK(explore::ToText(*event) == text);
    }
    CHECK(!explore::ParseEvent("reply x sideways #1 success"));
    CHECK(!explore::ParseEvent("timeout x action 1"));
    CHECK(!explore::ParseEvent("explode"));
}

TEST_CASE("a machine that compensates a step twice is caught, with the shortest sequence") {
    const auto definition = Load("order-payment.yaml");
    // Broken: when a compensation succeeds it sends the same compensation again, as a new command.
    const explore::Decider twice = [](const SagaDefinition& d, const machine::SagaState& s, const machine::Event& e) {
        auto decision = machine::Decide(d, s, e);
        const auto* reply = std::get_if<machine::Reply>(&e);
        if (!decision.ignored && reply != nullptr && reply->phase == machine::Phase::kCompensation &&
            reply->outcome == machine::Outcome::kSuccess) {
            machine::StepPhaseState again;
            again.step_name = reply->step_name;
            again.phase = machine::Phase::kCompensation;
            decision.state.phases.push_back(again);
            decision.commands.push_back(machine::Dispatch{reply->step_name, machine::Phase::kCompensation, 1, {}});
        }
        return decision;
    };
    const auto report = explore::Explore(definition, {}, twice);
    INFO(report.Text());
    REQUIRE(!report.Ok());
    const auto* one_id = Find(report, "one-id");
    REQUIRE(one_id != nullptr);
    // Shortest: cancelled while the order is being created, the order's cancellation answered.
    CHECK(Joined(one_id->events) == "begin; cancel; reply create-order compensation #1 success");
    // The sequence replays as a test: broken with the broken machine, clean with the real one.
    const auto broken = explore::Replay(definition, one_id->events, twice);
    CHECK(std::find(broken.begin(), broken.end(), "one-id") != broken.end());
    CHECK(explore::Replay(definition, one_id->events).empty());
}

TEST_CASE("a machine that forgets a timed-out step's compensation is caught") {
    const auto definition = Load("order-payment.yaml");
    // Broken: a timeout on the last attempt is taken as a definite failure, so the step that may
    // have taken effect is not compensated (only the steps before it are).
    const explore::Decider forgets = [](const SagaDefinition& d, const machine::SagaState& s, const machine::Event& e) {
        if (const auto* t = std::get_if<machine::Timeout>(&e)) {
            const auto* phase = s.Find(t->step_name, t->phase);
            const auto* step = d.FindStep(t->step_name);
            if (phase != nullptr && step != nullptr && phase->attempt == t->attempt && !phase->awaiting_retry &&
                phase->attempt >= step->retry.max_attempts) {
                return machine::Decide(
                    d, s, machine::Reply{t->step_name, t->phase, t->attempt, machine::Outcome::kFailure, {}});
            }
        }
        return machine::Decide(d, s, e);
    };
    const auto report = explore::Explore(definition, {}, forgets);
    INFO(report.Text());
    const auto* v = Find(report, "undo-unknown");
    REQUIRE(v != nullptr);
    // Shortest: create-order's two first attempts fail to answer in time or ask for a retry, each
    // followed by its retry, then the third times out.
    CHECK(v->events.size() == 6);
    CHECK(v->events.back() == "timeout create-order action #3");
    CHECK(explore::Replay(definition, v->events, forgets) == std::vector<std::string>{"undo-unknown"});
    CHECK(explore::Replay(definition, v->events).empty());
}

TEST_CASE("a machine that leaves a saga with nothing in flight is caught") {
    const auto definition = Load("order-payment.yaml");
    // Broken: a cancel marks the saga compensating and sends nothing.
    const explore::Decider stuck = [](const SagaDefinition& d, const machine::SagaState& s, const machine::Event& e) {
        auto decision = machine::Decide(d, s, e);
        if (std::holds_alternative<machine::Cancel>(e) && !decision.ignored) {
            decision = {s, {}, std::nullopt};
            decision.state.status = machine::SagaStatus::kCompensating;
            for (auto& p : decision.state.phases) {
                if (p.status == machine::StepStatus::kDispatched) p.status = machine::StepStatus::kFailed;
            }
        }
        return decision;
    };
    const auto report = explore::Explore(definition, {}, stuck);
    const auto* v = Find(report, "live");
    REQUIRE(v != nullptr);
    CHECK(Joined(v->events) == "begin; cancel");
}

TEST_CASE("a definition with a compensatable step after its pivot is caught") {
    // The loader refuses this shape; built by hand, the explorer finds what it would do.
    auto definition = Load("order-payment.yaml");
    definition.steps[1].kind = StepKind::kPivot;          // charge-payment: the point of no return
    definition.steps[2].kind = StepKind::kCompensatable;  // approve-order after it, compensatable
    definition.steps[2].compensation = sagaflow::CommandSpec{"UnapproveOrder.v1", nlohmann::json::object()};
    const auto report = explore::Explore(definition);
    INFO(report.Text());
    const auto* v = Find(report, "pivot");
    REQUIRE(v != nullptr);
    // Caught when the pivot is dispatched: approve-order, compensatable, has yet to run after it.
    CHECK(Joined(v->events) == "begin; reply create-order action #1 success");
    CHECK(v->detail ==
          "compensatable step 'approve-order' had not run when step 'charge-payment', past the point of "
          "no return, ran");
}

TEST_CASE("a machine that compensates a step before the branches that waited for it is caught") {
    auto loaded = sagaflow::LoadDefinitionString(R"(
saga: fan
version: 1
steps:
  - {name: a, participant: p, kind: compensatable, command: A, compensation: UndoA}
  - {name: b, participant: p, kind: compensatable, command: B, compensation: UndoB}
  - {name: c, after: [a], participant: p, kind: compensatable, command: C, compensation: UndoC}
  - {name: d, after: [b, c], participant: p, kind: pivot, command: D}
)",
                                                 "fan.yaml");
    REQUIRE(loaded.definition);
    const auto& definition = *loaded.definition;
    // Broken: once the saga turns to compensating, every step that took effect is compensated at
    // once, without waiting for the steps that depend on it.
    const explore::Decider eager = [](const SagaDefinition& d, const machine::SagaState& s, const machine::Event& e) {
        auto decision = machine::Decide(d, s, e);
        if (decision.ignored || s.status != machine::SagaStatus::kRunning ||
            decision.state.status != machine::SagaStatus::kCompensating) {
            return decision;
        }
        for (const auto& step : d.steps) {
            const auto* action = decision.state.Find(step.name, machine::Phase::kAction);
            if (!step.compensation || action == nullptr ||
                (action->status != machine::StepStatus::kSucceeded && !action->outcome_unknown) ||
                decision.state.Find(step.name, machine::Phase::kCompensation) != nullptr) {
                continue;
            }
            machine::StepPhaseState undo;
            undo.step_name = step.name;
            undo.phase = machine::Phase::kCompensation;
            decision.state.phases.push_back(undo);
            decision.commands.push_back(machine::Dispatch{step.name, machine::Phase::kCompensation, 1, {}});
        }
        return decision;
    };
    CHECK(explore::Explore(definition).Ok());
    const auto report = explore::Explore(definition, {}, eager);
    INFO(report.Text());
    const auto* v = Find(report, "undo-order");
    REQUIRE(v != nullptr);
    // Shortest: a succeeded, then b fails while c is in flight (c's outcome unknown: undone first).
    CHECK(Joined(v->events) == "begin; reply a action #1 success; reply b action #1 failure");
    CHECK(v->detail == "step 'a' was compensated before step 'c', which waited for it, was compensated");
    CHECK(explore::Replay(definition, v->events, eager) == std::vector<std::string>{"undo-order"});
    CHECK(explore::Replay(definition, v->events).empty());
}

TEST_CASE("a condition's outcomes are each explored, and a sequence names the outcomes it assumes") {
    auto loaded = sagaflow::LoadDefinitionString(R"(
saga: wrap
version: 1
input: {gift: {type: boolean, default: false}}
steps:
  - {name: order, participant: p, kind: compensatable, command: A, compensation: UndoA}
  - {name: wrap, when: {path: $.input.gift, equals: true}, participant: p, kind: compensatable, command: W,
     compensation: UndoW}
  - {name: ship, participant: p, kind: pivot, command: S}
)",
                                                 "wrap.yaml");
    REQUIRE(loaded.definition);
    const auto report = explore::Explore(*loaded.definition);
    INFO(report.Text());
    CHECK(report.Ok());
    CHECK(report.end_states.count("completed") == 1);
    CHECK(report.end_states.count("(skipped wrap) completed") == 1);
    CHECK(report.end_states.count("compensated: undid wrap, order") == 1);
    CHECK(report.end_states.count("(skipped wrap) compensated: undid wrap, order") == 0);  // never undone if skipped
    // A machine that compensates skipped steps is caught under the assumption that skips them.
    const explore::Decider undo_skipped =
        [](const SagaDefinition& d, const machine::SagaState& s, const machine::Event& e) {
            auto decision = machine::Decide(d, s, e);
            if (decision.ignored || decision.state.status != machine::SagaStatus::kCompensating) return decision;
            for (auto& p : decision.state.phases) {
                if (p.status != machine::StepStatus::kSkipped ||
                    decision.state.Find(p.step_name, machine::Phase::kCompensation))
                    continue;
                const std::string name = p.step_name;
                decision.state.phases.push_back({name,
                                                 machine::Phase::kCompensation,
                                                 machine::StepStatus::kDispatched,
                                                 1,
                                                 false,
                                                 false,
                                                 false,
                                                 nullptr});
                decision.commands.push_back(machine::Dispatch{name, machine::Phase::kCompensation, 1, {}});
                break;
            }
            return decision;
        };
    const auto broken = explore::Explore(*loaded.definition, {}, undo_skipped);
    const auto* v = Find(broken, "undo-effect");
    REQUIRE(v != nullptr);
    CHECK(Joined(v->events) ==
          "assume wrap skipped; begin; reply order action #1 success; reply ship action #1 failure");
    CHECK(v->detail == "step 'wrap' was compensated although it was skipped");
}
