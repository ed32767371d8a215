// `sagaflow upgrade-check` (core/upgrade_check.hpp): a table of OLD/NEW pairs of the sample saga,
// each classified exactly as expected.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "core/definition_loader.hpp"
#include "core/upgrade_check.hpp"

namespace upgrade = sagaflow::upgrade;
using upgrade::Verdict;

namespace {

std::string SampleYaml() {
    const char* dir = std::getenv("SAGAFLOW_SOURCE_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "SAGAFLOW_SOURCE_DIR is not set: run this test through ctest");
    std::ifstream in(std::filesystem::path(dir) / "sagas/order-payment.yaml");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// `yaml` with each (from, to) replaced once; every `from` must be there.
std::string Edited(std::string yaml, const std::vector<std::pair<std::string, std::string>>& edits) {
    for (const auto& [from, to] : edits) {
        const auto at = yaml.find(from);
        REQUIRE_MESSAGE(at != std::string::npos, from);
        yaml.replace(at, from.size(), to);
    }
    return yaml;
}

sagaflow::SagaDefinition Load(const std::string& yaml) {
    auto result = sagaflow::LoadDefinitionString(yaml, "new.yaml");
    std::string diagnostics;
    for (const auto& d : result.diagnostics) diagnostics += d.ToString() + "\n";
    REQUIRE_MESSAGE(result.definition, diagnostics);
    return *result.definition;
}

using Expected = std::set<std::tuple<std::string, std::string, Verdict>>;  // kind, step, verdict

}  // namespace

TEST_CASE("OLD/NEW pairs of the sample saga are classified exactly") {
    const std::string old_yaml = SampleYaml();
    const auto old_definition = Load(old_yaml);
    const std::pair<std::string, std::string> v2{"version: 1", "version: 2"};
    struct Case {
        std::string name;
        std::vector<std::pair<std::string, std::string>> edits;
        Expected expected;
        Verdict verdict;
    };
    const std::vector<Case> cases{
        {"a new version that changes only timeouts", {v2, {"timeout: 5s", "timeout: 8s"}}, {}, Verdict::kSafe},
        {"a step added at the end",
         {v2,
          {"    retry:\n      maxAttempts: 50",
           "    retry:\n      maxAttempts: 50\n      backoff: {initial: 200ms, max: 30s}\n\n  - name: notify-customer\n"
           "    participant: mailer\n    kind: retriable\n    command: NotifyCustomer.v1\n    send:\n      orderId: "
           "$.input.orderId\n    retry:\n      maxAttempts: 5"}},
         {{"step-added", "notify-customer", Verdict::kSafe}},
         Verdict::kSafe},
        {"the retriable step removed",
         {v2,
          {"  - name: approve-order\n    participant: order\n    kind: retriable\n    command: ApproveOrder.v1\n    "
           "send:\n"
           "      orderId: $.input.orderId\n      paymentId: $.data.paymentId\n    retry:\n      maxAttempts: 50\n"
           "      backoff: {initial: 200ms, max: 30s}\n",
           ""}},
         {{"step-removed", "approve-order", Verdict::kNeedsBothHandlers}},
         Verdict::kNeedsBothHandlers},
        {"the charge's command type renamed",
         {v2, {"command: ChargePayment.v1", "command: ChargePayment.v2"}},
         {{"command-renamed", "charge-payment", Verdict::kNeedsBothHandlers}},
         Verdict::kNeedsBothHandlers},
        {"the refund renamed",
         {v2, {"command: RefundPayment.v1", "command: RefundPayment.v2"}},
         {{"compensation-renamed", "charge-payment", Verdict::kNeedsBothHandlers}},
         Verdict::kNeedsBothHandlers},
        {"a field added to the charge under the same type",
         {v2,
          {"      externalPaymentId: $.input.orderId\n", "      externalPaymentId: $.input.orderId\n      note: x\n"}},
         {{"send-field-added", "charge-payment", Verdict::kUnsafe}},
         Verdict::kUnsafe},
        {"a field added to the charge under a new type",
         {v2,
          {"      externalPaymentId: $.input.orderId\n", "      externalPaymentId: $.input.orderId\n      note: x\n"},
          {"command: ChargePayment.v1", "command: ChargePayment.v2"}},
         {{"command-renamed", "charge-payment", Verdict::kNeedsBothHandlers}},
         Verdict::kNeedsBothHandlers},
        {"a field the refund reads no longer taken from the charge's reply",
         {v2, {"paymentId: $.reply.paymentId", "paymentId: $.reply.id"}},
         {{"saved-field-dropped", "charge-payment", Verdict::kUnsafe}},
         Verdict::kUnsafe},
        {"a field dropped from the order's command",
         {v2, {"      currency: $.input.currency\n\n  - name: charge-payment", "\n  - name: charge-payment"}},
         {{"send-field-removed", "create-order", Verdict::kSafe}},
         Verdict::kSafe},
        {"a step renamed, its commands kept",
         {v2, {"name: charge-payment", "name: charge"}},
         {{"step-renamed", "charge-payment", Verdict::kSafe}},
         Verdict::kSafe},
        {"a step moved to another participant",
         {v2,
          {"  - name: approve-order\n    participant: order", "  - name: approve-order\n    participant: fulfilment"}},
         {{"participant-changed", "approve-order", Verdict::kNeedsBothHandlers}},
         Verdict::kNeedsBothHandlers},
        {"the charge made the pivot",
         {v2,
          {"    participant: payment\n    kind: compensatable", "    participant: payment\n    kind: pivot"},
          {"    compensation:\n      command: RefundPayment.v1\n      send:\n        paymentId: $.data.paymentId\n"
           "        orderId: $.input.orderId\n",
           ""}},
         {{"kind-changed", "charge-payment", Verdict::kSafe},
          {"compensation-removed", "charge-payment", Verdict::kNeedsBothHandlers},
          {"pivot-moved", "", Verdict::kSafe}},
         Verdict::kNeedsBothHandlers},
    };
    for (const auto& c : cases) {
        CAPTURE(c.name);
        const auto report = upgrade::Compare(old_definition, Load(Edited(old_yaml, c.edits)));
        INFO(report.Text());
        Expected got;
        for (const auto& change : report.changes) got.insert({change.kind, change.step, change.verdict});
        CHECK(got == c.expected);
        CHECK(report.Worst() == c.verdict);
        CHECK(report.Json()["verdict"] == upgrade::ToString(c.verdict));
    }
}

TEST_CASE("the handlers an unfinished instance may still need, by its step") {
    const auto definition = Load(SampleYaml());
    CHECK(upgrade::HandlersNeeded(definition, 0, false) ==
          std::vector<std::string>{"order: CreateOrder.v1", "order: CancelOrder.v1"});
    CHECK(upgrade::HandlersNeeded(definition, 1, true) ==
          std::vector<std::string>{"payment: RefundPayment.v1", "order: CancelOrder.v1"});
    // approve-order is retriable: past the point of no return nothing is compensated any more.
    CHECK(upgrade::HandlersNeeded(definition, 2, false) == std::vector<std::string>{"order: ApproveOrder.v1"});
}

TEST_CASE("graph changes are classified: branches split and joined, dependencies, conditions") {
    const auto load = [](const std::string& yaml) {
        auto result = sagaflow::LoadDefinitionString(yaml, "s.yaml");
        for (const auto& d : result.diagnostics) FAIL(d.ToString());
        REQUIRE(result.definition);
        return *result.definition;
    };
    const auto old_version = load(R"(
saga: s
version: 1
input: {gift: {type: boolean, default: false}}
steps:
  - {name: a, participant: p, kind: compensatable, command: A, compensation: UndoA}
  - {name: b, participant: p, kind: compensatable, command: B, compensation: UndoB}
  - {name: c, participant: p, kind: pivot, command: C}
)");
    const auto new_version = load(R"(
saga: s
version: 2
input: {gift: {type: boolean, default: false}}
steps:
  - {name: a, participant: p, kind: compensatable, command: A, compensation: UndoA}
  - {name: b, after: [], when: {path: $.input.gift, equals: true}, participant: p, kind: compensatable, command: B,
     compensation: UndoB}
  - {name: c, after: [a, b], participant: p, kind: pivot, command: C}
)");
    const auto kinds = [](const sagaflow::upgrade::Report& report) {
        std::vector<std::string> out;
        for (const auto& c : report.changes) out.push_back(c.kind + " " + c.step);
        return out;
    };
    const auto report = sagaflow::upgrade::Compare(old_version, new_version);
    CHECK(kinds(report) == std::vector<std::string>{"branch-split b", "made-conditional b", "branch-joined c"});
    CHECK(report.Worst() == sagaflow::upgrade::Verdict::kSafe);
    // Back again: the join is split, the condition removed.
    CHECK(kinds(sagaflow::upgrade::Compare(new_version, old_version)) ==
          std::vector<std::string>{"dependency-added b", "condition-removed b", "branch-split c"});
}
