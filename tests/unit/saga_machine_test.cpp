// Every transition of the pure saga state machine, including compensation paths and duplicate or
// out-of-order events.
#include <doctest/doctest.h>

#include "core/definition_loader.hpp"
#include "core/saga_machine.hpp"

using namespace sagaflow::machine;
using sagaflow::SagaDefinition;

namespace {

const SagaDefinition& OrderPayment() {
    static const SagaDefinition definition = [] {
        auto result = sagaflow::LoadDefinitionString(R"(
saga: order-payment
version: 1
defaults:
  timeout: 5s
  retry: {maxAttempts: 3, backoff: {initial: 100ms, max: 1s, multiplier: 2}}
  compensationRetry: {maxAttempts: 2, backoff: {initial: 1s, max: 1s}}
steps:
  - {name: create-order, participant: order, kind: compensatable, command: CreateOrder, compensation: CancelOrder}
  - name: charge-payment
    participant: payment
    kind: compensatable
    command: ChargePayment
    compensation: RefundPayment
    save: {paymentId: $.reply.paymentId}
  - {name: approve-order, participant: order, kind: retriable, command: ApproveOrder, retry: {maxAttempts: 2}}
)",
                                                     "order-payment.yaml");
        REQUIRE(result.definition);
        return *result.definition;
    }();
    return definition;
}

const SagaDefinition& WithPivot() {
    static const SagaDefinition definition = [] {
        auto result = sagaflow::LoadDefinitionString(R"(
saga: trip
version: 1
defaults: {retry: {maxAttempts: 2}}
steps:
  - {name: hold, participant: hotel, kind: compensatable, command: Hold, compensation: Release}
  - {name: charge, participant: pay, kind: pivot, command: Charge}
  - {name: confirm, participant: hotel, kind: retriable, command: Confirm}
)",
                                                     "trip.yaml");
        REQUIRE(result.definition);
        return *result.definition;
    }();
    return definition;
}

// Feeds events one after another, keeping the state; returns the last decision.
struct Run {
    const SagaDefinition& definition;
    SagaState state;
    Decision last;

    Decision& operator()(const Event& event) {
        last = Decide(definition, state, event);
        state = last.state;
        return last;
    }
};

Reply Ok(const std::string& step, nlohmann::json data = nlohmann::json::object(), int attempt = 1) {
    return Reply{step, Phase::kAction, attempt, Outcome::kSuccess, std::move(data)};
}
Reply Fail(const std::string& step) {
    return Reply{step, Phase::kAction, 1, Outcome::kFailure, {}};
}
Reply CompOk(const std::string& step) {
    return Reply{step, Phase::kCompensation, 1, Outcome::kSuccess, {}};
}

const Dispatch& OnlyDispatch(const Decision& d) {
    REQUIRE(d.commands.size() == 1);
    REQUIRE(std::holds_alternative<Dispatch>(d.commands[0]));
    return std::get<Dispatch>(d.commands[0]);
}

SagaStatus FinishedAs(const Decision& d) {
    REQUIRE(d.commands.size() == 1);
    REQUIRE(std::holds_alternative<Finish>(d.commands[0]));
    return std::get<Finish>(d.commands[0]).status;
}

}  // namespace

TEST_CASE("happy path: each step is dispatched once, in order; replies save data; the saga completes") {
    Run run{OrderPayment(), {}, {}};
    CHECK(OnlyDispatch(run(Begin{})).step_name == "create-order");
    CHECK(OnlyDispatch(run.last).timeout == std::chrono::seconds(5));
    CHECK(OnlyDispatch(run(Ok("create-order"))).step_name == "charge-payment");
    const auto& approve = OnlyDispatch(run(Ok("charge-payment", {{"paymentId", "p-7"}})));
    CHECK(approve.step_name == "approve-order");
    CHECK(run.state.data["paymentId"] == "p-7");
    CHECK(run.state.current_step == 2);
    CHECK(FinishedAs(run(Ok("approve-order"))) == SagaStatus::kCompleted);
    CHECK(run.state.status == SagaStatus::kCompleted);
    CHECK(run.state.phases.size() == 3);
}

TEST_CASE("a failure at each step compensates exactly the completed steps, newest first") {
    SUBCASE("first step fails: nothing to undo") {
        Run run{OrderPayment(), {}, {}};
        run(Begin{});
        CHECK(FinishedAs(run(Fail("create-order"))) == SagaStatus::kCompensated);
        CHECK(run.state.phases.size() == 1);
    }
    SUBCASE("second step fails: the first is undone") {
        Run run{OrderPayment(), {}, {}};
        run(Begin{});
        run(Ok("create-order"));
        const auto& undo = OnlyDispatch(run(Fail("charge-payment")));
        CHECK(undo.step_name == "create-order");
        CHECK(undo.phase == Phase::kCompensation);
        CHECK(run.state.status == SagaStatus::kCompensating);
        CHECK(FinishedAs(run(CompOk("create-order"))) == SagaStatus::kCompensated);
    }
    SUBCASE("the retriable step never fails: a failure reply is retried") {
        Run run{OrderPayment(), {}, {}};
        run(Begin{});
        run(Ok("create-order"));
        run(Ok("charge-payment"));
        const auto& d = run(Fail("approve-order"));
        REQUIRE(d.commands.size() == 1);
        CHECK(std::get<ScheduleRetry>(d.commands[0]).attempt == 2);
        CHECK(run.state.status == SagaStatus::kRunning);
    }
}

TEST_CASE("timeouts: durable retries with backoff and the same command, then compensation incl. the unknown step") {
    Run run{OrderPayment(), {}, {}};
    run(Begin{});
    run(Ok("create-order"));
    const auto& retry = run(Timeout{"charge-payment", Phase::kAction, 1});
    REQUIRE(retry.commands.size() == 1);
    CHECK(std::get<ScheduleRetry>(retry.commands[0]).attempt == 2);
    CHECK(std::get<ScheduleRetry>(retry.commands[0]).delay == std::chrono::milliseconds(100));
    CHECK(run(Timeout{"charge-payment", Phase::kAction, 1}).ignored.has_value());  // the same deadline again
    const auto& resend = OnlyDispatch(run(RetryDue{"charge-payment", Phase::kAction, 2}));
    CHECK(resend.attempt == 2);
    run(Timeout{"charge-payment", Phase::kAction, 2});
    CHECK(std::get<ScheduleRetry>(run.last.commands[0]).delay == std::chrono::milliseconds(200));
    run(RetryDue{"charge-payment", Phase::kAction, 3});
    // The last attempt times out: the charge may have happened, so it is refunded first.
    const auto& refund = OnlyDispatch(run(Timeout{"charge-payment", Phase::kAction, 3}));
    CHECK(refund.step_name == "charge-payment");
    CHECK(refund.phase == Phase::kCompensation);
    // The late answer of the charge changes nothing: its compensation is under way.
    CHECK(run(Ok("charge-payment", {}, 3)).ignored ==
          "the action of step 'charge-payment' timed out on its last attempt and is treated as done, then "
          "compensated: this late event changes nothing");
    CHECK(OnlyDispatch(run(CompOk("charge-payment"))).step_name == "create-order");
    CHECK(FinishedAs(run(CompOk("create-order"))) == SagaStatus::kCompensated);
    CHECK(run(Ok("charge-payment", {}, 3)).ignored == "the saga is already compensated");
}

TEST_CASE("a reply to an earlier attempt answers the step; a reply to an attempt not sent is refused") {
    Run run{OrderPayment(), {}, {}};
    run(Begin{});
    run(Timeout{"create-order", Phase::kAction, 1});
    run(RetryDue{"create-order", Phase::kAction, 2});
    CHECK(run(Ok("create-order", {}, 3)).ignored == "reply to attempt 3, but only 2 were sent");
    CHECK(OnlyDispatch(run(Ok("create-order", {}, 1))).step_name == "charge-payment");
}

TEST_CASE("duplicate, unknown and out-of-order events change nothing") {
    Run run{OrderPayment(), {}, {}};
    run(Begin{});
    run(Ok("create-order"));
    const SagaState before = run.state;
    CHECK(run(Ok("create-order")).ignored == "the action of step 'create-order' is already answered");
    CHECK(run.last.commands.empty());
    CHECK(run(Ok("approve-order")).ignored == "the action of step 'approve-order' was never dispatched");
    CHECK(run(Ok("no-such-step")).ignored == "no step named 'no-such-step' in this definition");
    CHECK(run(CompOk("create-order")).ignored == "the compensation of step 'create-order' was never dispatched");
    CHECK(run(RetryDue{"charge-payment", Phase::kAction, 2}).ignored == "no retry of attempt 2 is due");
    CHECK(run(Begin{}).ignored == "the saga has already begun");
    CHECK(run.state.phases.size() == before.phases.size());
    CHECK(run.state.current_step == before.current_step);
}

TEST_CASE("a compensation is retried until its budget is spent, then the saga is parked as failed") {
    Run run{OrderPayment(), {}, {}};
    run(Begin{});
    run(Ok("create-order"));
    run(Fail("charge-payment"));
    const auto& retry = run(Reply{"create-order", Phase::kCompensation, 1, Outcome::kFailure, {}});
    CHECK(std::get<ScheduleRetry>(retry.commands[0]).delay == std::chrono::seconds(1));
    run(RetryDue{"create-order", Phase::kCompensation, 2});
    CHECK(FinishedAs(run(Timeout{"create-order", Phase::kCompensation, 2})) == SagaStatus::kFailed);
    CHECK(run.state.parked_reason ==
          "compensation of step 'create-order' did not succeed after 2 attempts; an operator must resolve it and "
          "retry the saga");
    CHECK(run(CompOk("create-order")).ignored == "the saga is already failed");
}

TEST_CASE("pivot: a failure compensates before it; an unknown outcome parks the saga; after it only retries") {
    SUBCASE("pivot fails") {
        Run run{WithPivot(), {}, {}};
        run(Begin{});
        run(Ok("hold"));
        CHECK(OnlyDispatch(run(Fail("charge"))).step_name == "hold");
    }
    SUBCASE("pivot never answers") {
        Run run{WithPivot(), {}, {}};
        run(Begin{});
        run(Ok("hold"));
        run(Timeout{"charge", Phase::kAction, 1});
        run(RetryDue{"charge", Phase::kAction, 2});
        CHECK(FinishedAs(run(Timeout{"charge", Phase::kAction, 2})) == SagaStatus::kFailed);
        CHECK(run.state.parked_reason ==
              "the pivot 'charge' gave no definite answer after 2 attempts; an operator must decide whether it took "
              "effect");
    }
    SUBCASE("a retriable step that never succeeds is parked, never compensated") {
        Run run{WithPivot(), {}, {}};
        run(Begin{});
        run(Ok("hold"));
        run(Ok("charge"));
        run(Fail("confirm"));
        run(RetryDue{"confirm", Phase::kAction, 2});
        CHECK(FinishedAs(run(Fail("confirm"))) == SagaStatus::kFailed);
        CHECK(run.state.Find("hold", Phase::kCompensation) == nullptr);
    }
}

TEST_CASE("a participant's 'retry' answer, a reply during the backoff, and timers that lost the race") {
    SUBCASE("retry outcome schedules the next attempt of the same command") {
        Run run{OrderPayment(), {}, {}};
        run(Begin{});
        const auto& retry = run(Reply{"create-order", Phase::kAction, 1, Outcome::kRetry, {}});
        REQUIRE(retry.commands.size() == 1);
        const auto& scheduled = std::get<ScheduleRetry>(retry.commands[0]);
        CHECK(scheduled.attempt == 2);
        CHECK(scheduled.delay == std::chrono::milliseconds(100));
        CHECK(run.state.Find("create-order", Phase::kAction)->awaiting_retry);
        const auto& resend = OnlyDispatch(run(RetryDue{"create-order", Phase::kAction, 2}));
        CHECK(resend.attempt == 2);
        CHECK(resend.step_name == "create-order");
    }
    SUBCASE("a late reply while the retry waits answers the step; the due retry is then stale") {
        Run run{OrderPayment(), {}, {}};
        run(Begin{});
        run(Timeout{"create-order", Phase::kAction, 1});
        CHECK(OnlyDispatch(run(Ok("create-order"))).step_name == "charge-payment");
        CHECK_FALSE(run.state.Find("create-order", Phase::kAction)->awaiting_retry);
        CHECK(run(RetryDue{"create-order", Phase::kAction, 2}).ignored ==
              "the action of step 'create-order' is already answered");
    }
    SUBCASE("a timeout that fires after the reply, or for an old attempt, changes nothing") {
        Run run{OrderPayment(), {}, {}};
        run(Begin{});
        run(Ok("create-order"));
        CHECK(run(Timeout{"create-order", Phase::kAction, 1}).ignored ==
              "the action of step 'create-order' is already answered");
        run(Timeout{"charge-payment", Phase::kAction, 1});
        run(RetryDue{"charge-payment", Phase::kAction, 2});
        CHECK(run(Timeout{"charge-payment", Phase::kAction, 1}).ignored == "stale timeout of attempt 1");
    }
    SUBCASE("a timeout during the backoff is stale too") {
        Run run{OrderPayment(), {}, {}};
        run(Begin{});
        run(Timeout{"create-order", Phase::kAction, 1});
        CHECK(run(Timeout{"create-order", Phase::kAction, 1}).ignored == "stale timeout of attempt 1");
    }
    SUBCASE("a saga without steps completes at once") {
        SagaDefinition empty = OrderPayment();
        empty.steps.clear();
        Run run{empty, {}, {}};
        CHECK(FinishedAs(run(Begin{})) == SagaStatus::kCompleted);
        CHECK(run.state.status == SagaStatus::kCompleted);
    }
}

TEST_CASE("cancel: before the point of no return the step in flight and the completed steps are undone") {
    SUBCASE("during the second step: its action and the first step are compensated, newest first") {
        Run run{OrderPayment(), {}, {}};
        run(Begin{});
        run(Ok("create-order"));
        const auto& refund = OnlyDispatch(run(Cancel{"customer changed their mind"}));
        CHECK(refund.step_name == "charge-payment");
        CHECK(refund.phase == Phase::kCompensation);
        CHECK(run.state.status == SagaStatus::kCompensating);
        const auto* charge = run.state.Find("charge-payment", Phase::kAction);
        CHECK(charge->status == StepStatus::kFailed);
        CHECK(charge->outcome_unknown);
        CHECK(charge->cancelled);
        // The charge's late answer changes nothing: its refund is under way.
        CHECK(run(Ok("charge-payment")).ignored ==
              "the action of step 'charge-payment' was cancelled while in flight and is treated as done, then "
              "compensated: this late event changes nothing");
        CHECK(run(Cancel{"again"}).ignored == "the saga is already compensating");
        CHECK(OnlyDispatch(run(CompOk("charge-payment"))).step_name == "create-order");
        CHECK(FinishedAs(run(CompOk("create-order"))) == SagaStatus::kCompensated);
        CHECK(run(Cancel{"late"}).ignored == "the saga is already compensated");
    }
    SUBCASE("while the first step waits for its next attempt: the retry due then is stale") {
        Run run{OrderPayment(), {}, {}};
        run(Begin{});
        run(Timeout{"create-order", Phase::kAction, 1});
        const auto& undo = OnlyDispatch(run(Cancel{}));
        CHECK(undo.step_name == "create-order");
        CHECK(undo.phase == Phase::kCompensation);
        CHECK_FALSE(run.state.Find("create-order", Phase::kAction)->awaiting_retry);
        CHECK(run(RetryDue{"create-order", Phase::kAction, 2}).ignored ==
              "the action of step 'create-order' was cancelled while in flight and is treated as done, then "
              "compensated: this late event changes nothing");
        CHECK(FinishedAs(run(CompOk("create-order"))) == SagaStatus::kCompensated);
    }
    SUBCASE("a retriable step in flight: refused, the saga runs on") {
        Run run{OrderPayment(), {}, {}};
        run(Begin{});
        run(Ok("create-order"));
        run(Ok("charge-payment"));
        const auto& refused = run(Cancel{});
        CHECK(refused.ignored ==
              "step 'approve-order' is retriable and in flight: the saga is past its point of no return and can only "
              "complete");
        CHECK(refused.commands.empty());
        CHECK(run.state.status == SagaStatus::kRunning);
        CHECK(FinishedAs(run(Ok("approve-order"))) == SagaStatus::kCompleted);
    }
    SUBCASE("the pivot in flight or done: refused") {
        Run run{WithPivot(), {}, {}};
        run(Begin{});
        run(Ok("hold"));
        CHECK(
            run(Cancel{}).ignored ==
            "step 'charge' is the pivot and in flight: the saga is past its point of no return and can only complete");
        run(Ok("charge"));
        CHECK(run(Cancel{}).ignored ==
              "step 'charge' is the pivot and has succeeded: the saga is past its point of no return and can only "
              "complete");
        CHECK(run.state.Find("hold", Phase::kCompensation) == nullptr);
    }
    SUBCASE("before the first step is dispatched, or after the end: refused") {
        Run run{OrderPayment(), {}, {}};
        CHECK(run(Cancel{}).ignored == "the saga has not begun");
        run(Begin{});
        run(Ok("create-order"));
        run(Ok("charge-payment"));
        run(Ok("approve-order"));
        CHECK(run(Cancel{}).ignored == "the saga is already completed");
    }
}
