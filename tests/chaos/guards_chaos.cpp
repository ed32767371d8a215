// Proof that the audit can fail: each guard, disabled on its own by the test-only switch
// SAGAFLOW_TEST_DISABLE_GUARD, lets exactly the damage through that the guard exists for, and the
// audit reports it. With the guard on, the same scenario passes the audit.
#include <doctest/doctest.h>
#include <signal.h>

#include "outbox/uuid.hpp"
#include "tests/support/example_rig.hpp"
#include "tests/support/kafka_send.hpp"

using namespace sagaflow;
using testing::ExampleRig;

namespace {

long long Violations(const AuditReport& report, const std::string& check) {
    for (const auto& c : report.checks) {
        if (c.name == check) return c.violations;
    }
    return -1;
}

// Runs `scenario` with `guard` disabled in the process `where` (engine | payment), then audits.
AuditReport RunWithGuard(const std::string& guard,
                         const std::string& where,
                         const std::function<void(ExampleRig&, Engine&)>& scenario,
                         const std::vector<std::string>& payment_extra = {}) {
    ExampleRig rig;
    const std::vector<std::string> off{"SAGAFLOW_TEST_DISABLE_GUARD=" + guard};
    auto engine = rig.SpawnEngine("engine-1", where == "engine" ? off : std::vector<std::string>{});
    auto order = rig.SpawnOrderService();
    auto payment = rig.SpawnPaymentService(where == "payment" ? off : std::vector<std::string>{}, payment_extra);
    auto front = rig.FrontEnd();
    scenario(rig, *front);
    CHECK(rig.WaitQuiet(std::chrono::seconds(120)));
    const auto report = rig.Audit();
    MESSAGE(report.Summary());
    engine->KillAndWait(SIGTERM);
    order->KillAndWait(SIGTERM);
    payment->KillAndWait(SIGTERM);
    return report;
}

void StartSome(ExampleRig&, Engine& front, int count, const std::string& prefix) {
    for (int i = 0; i < count; ++i) {
        const auto id = prefix + "-" + std::to_string(i);
        REQUIRE(front.StartSaga("order-payment", ExampleRig::Input(id, "20.00"), id).Accepted());
    }
}

}  // namespace

TEST_CASE("without the inbox, commands are applied with no inbox record: apply-once fails") {
    const auto report =
        RunWithGuard("inbox", "payment", [](ExampleRig& rig, Engine& front) { StartSome(rig, front, 5, "inbox"); });
    CHECK(Violations(report, "apply-once") >= 5);
}

TEST_CASE("without dispatch dedup, a resend is a new event: dispatch-once fails") {
    // The provider is slow on one charge (6 s > the 5 s step timeout), so the engine resends it.
    const auto report = RunWithGuard("dispatch-dedup",
                                     "engine",
                                     [](ExampleRig& rig, Engine& front) { StartSome(rig, front, 1, "slow"); },
                                     {"--slow-order", "slow-0", "--slow-ms", "6000"});
    CHECK(Violations(report, "dispatch-once") >= 1);
}

TEST_CASE("without the anti-hanging tombstone, an action after its compensation lands: no-hanging fails") {
    const auto report = RunWithGuard("anti-hanging", "payment", [](ExampleRig& rig, Engine&) {
        // A compensation overtakes its action (a slow network): sent to the participant directly.
        const std::string saga = outbox::NewUuidV7();
        const nlohmann::json data{
            {"orderId", "late-1"}, {"customerId", 7}, {"amount", "20.00"}, {"externalPaymentId", "late-1"}};
        for (const auto& [phase, type] : std::vector<std::pair<std::string, std::string>>{
                 {"compensation", "RefundPayment.v1"}, {"action", "ChargePayment.v1"}}) {
            testing::SendEvent(rig.Brokers(),
                               rig.PaymentName() + ".commands",
                               testing::SagaEvent(saga, "charge-payment", phase, type, data));
        }
        testing::WaitFor(
            [&] {
                try {
                    return testing::Count(rig.DbUrl(), "SELECT count(*) FROM payments.participant_step") >= 2;
                } catch (const std::exception&) {
                    return false;  // the service has not created its schema yet
                }
            },
            std::chrono::seconds(60));
    });
    CHECK(Violations(report, "no-hanging") >= 1);
}

TEST_CASE("without the payment UNIQUE, one order started under two keys is charged twice: money fails") {
    const auto report = RunWithGuard("payment-unique", "payment", [](ExampleRig&, Engine& front) {
        const auto input = ExampleRig::Input("double-1", "20.00");
        REQUIRE(front.StartSaga("order-payment", input, "client-key-1").Accepted());
        REQUIRE(front.StartSaga("order-payment", input, "client-key-2").Accepted());  // rule X3's client bug
    });
    CHECK(Violations(report, "money") >= 1);
}

TEST_CASE("with every guard on, the same scenarios pass the audit") {
    ExampleRig rig;
    auto engine = rig.SpawnEngine("engine-1");
    auto order = rig.SpawnOrderService();
    auto payment = rig.SpawnPaymentService({}, {"--slow-order", "slow-0", "--slow-ms", "6000"});
    auto front = rig.FrontEnd();
    StartSome(rig, *front, 5, "ok");
    StartSome(rig, *front, 1, "slow");
    const auto input = ExampleRig::Input("double-1", "20.00");
    REQUIRE(front->StartSaga("order-payment", input, "client-key-1").Accepted());
    REQUIRE(front->StartSaga("order-payment", input, "client-key-2").Accepted());
    CHECK(rig.WaitQuiet(std::chrono::seconds(120)));
    const auto report = rig.Audit();
    INFO(report.Summary());
    CHECK(report.Ok());
    CHECK(report.sagas == 8);
    engine->KillAndWait(SIGTERM);
    order->KillAndWait(SIGTERM);
    payment->KillAndWait(SIGTERM);
}
