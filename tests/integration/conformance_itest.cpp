// `sagaflow conformance` against the example services as separate processes: both pass, and a
// participant that skips commands it has seen (instead of answering them again) fails.
#include <doctest/doctest.h>

#include "tests/support/example_rig.hpp"
#include "tests/support/services.hpp"

using sagaflow::testing::ExampleRig;
using sagaflow::testing::RunCli;

namespace {

std::string Conformance(const ExampleRig& rig, const std::string& participant, const std::string& rest) {
    return "conformance --participant " + participant + " --brokers " + rig.Brokers() + " --replies-topic " +
           rig.Replies() + " --timeout-seconds 20 " + rest;
}

}  // namespace

TEST_CASE("the C++ payment service passes every check, the retry answer included") {
    ExampleRig rig;
    const auto payment = rig.SpawnPaymentService({}, {"--retry-orders", "retry-"});
    const auto run = RunCli(Conformance(rig,
                                        rig.PaymentName(),
                                        "--action ChargePayment.v1 --compensation RefundPayment.v1 "
                                        "--retry-data '{\"orderId\": \"retry-{saga}\"}'"));
    INFO(run.out, run.err);
    CHECK(run.code == 0);
    CHECK(run.out.find("11 passed, 0 failed, 0 skipped") != std::string::npos);
    // What the checks did is what the payment table shows: one charge each for the first command
    // (then refunded), the duplicated one and the retried one, none for the refused late action.
    const auto count = [&](const std::string& sql) { return sagaflow::testing::Count(rig.DbUrl(), sql); };
    CHECK(count("SELECT count(*) FROM payments.payment") == 3);
    CHECK(count("SELECT count(DISTINCT order_id) FROM payments.payment") == 3);
    CHECK(count("SELECT count(*) FROM payments.refund") == 1);
    CHECK(count("SELECT count(*) FROM payments.payment WHERE status = 'refunded'") == 1);
}

TEST_CASE("the C++ order service passes every check it can be given") {
    ExampleRig rig;
    const auto order = rig.SpawnOrderService();
    const auto run =
        RunCli(Conformance(rig,
                           rig.OrderName(),
                           "--action CreateOrder.v1 --compensation CancelOrder.v1 --data '{\"orderId\": \"o-{saga}\", "
                           "\"customerId\": 1, \"amount\": \"1.00\", \"currency\": \"EUR\"}'"));
    INFO(run.out, run.err);
    CHECK(run.code == 0);
    CHECK(run.out.find("9 passed, 0 failed, 1 skipped") != std::string::npos);
}

TEST_CASE("a participant that skips a command it has answered fails the resend check") {
    ExampleRig rig;
    const auto payment = rig.SpawnPaymentService({"SAGAFLOW_TEST_DISABLE_GUARD=reanswer"});
    const auto run =
        RunCli(Conformance(rig, rig.PaymentName(), "--action ChargePayment.v1 --compensation RefundPayment.v1"));
    INFO(run.out, run.err);
    CHECK(run.code == 1);
    CHECK(run.out.find("FAIL resend-after-answer") != std::string::npos);
    CHECK(run.out.find("ok   first-command") != std::string::npos);
}
