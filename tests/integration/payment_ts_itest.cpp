// The TypeScript payment participant (examples/payment-ts), written from docs/protocol.md, in the
// sample saga beside the C++ order service and engine: conformance, and the saga with duplicates.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "outbox/kafka.hpp"
#include "outbox/uuid.hpp"
#include "tests/support/example_rig.hpp"
#include "tests/support/services.hpp"

using sagaflow::testing::Count;
using sagaflow::testing::ExampleRig;
using sagaflow::testing::RunCli;

TEST_CASE("the TypeScript payment service passes sagaflow conformance") {
    ExampleRig rig;
    const auto payment = rig.SpawnNodePaymentService({"--retry-orders", "retry-"});
    const auto run = RunCli("conformance --participant " + rig.PaymentName() + " --brokers " + rig.Brokers() +
                            " --replies-topic " + rig.Replies() +
                            " --timeout-seconds 30 --action ChargePayment.v1 --compensation RefundPayment.v1 "
                            "--retry-data '{\"orderId\": \"retry-{saga}\"}'");
    INFO(run.out, run.err);
    CHECK(run.code == 0);
    CHECK(run.out.find("11 passed, 0 failed, 0 skipped") != std::string::npos);
}

TEST_CASE("order-payment with the C++ order service and the TypeScript payment service: duplicates changed nothing") {
    ExampleRig rig;
    auto engine = rig.SpawnEngine("engine-1");
    auto order = rig.SpawnOrderService();
    const auto payment = rig.SpawnNodePaymentService();
    auto front = rig.FrontEnd();
    constexpr int kSagas = 30;
    int declined = 0;
    for (int i = 0; i < kSagas; ++i) {
        const bool over_limit = i % 5 == 4;  // the payment service declines amounts over 500
        declined += over_limit ? 1 : 0;
        const std::string id = "ts-" + std::to_string(i);
        REQUIRE(
            front->StartSaga("order-payment", ExampleRig::Input(id, over_limit ? "900.00" : "20.00"), id).Accepted());
        if (i == kSagas / 2) {
            // Every kind of message delivered again while sagas run: the engine's commands and the
            // TypeScript service's replies (published by sagaflow relay from its outbox).
            REQUIRE(sagaflow::testing::WaitFor(
                [&] {
                    return Count(rig.DbUrl(), "SELECT count(*) FROM payments.outbox WHERE published_at IS NOT NULL") >=
                           5;
                },
                std::chrono::seconds(60)));
            CHECK(sagaflow::testing::Redeliver(rig.DbUrl(), rig.Brokers(), "outbox", 30) > 0);
            CHECK(sagaflow::testing::Redeliver(rig.DbUrl(), rig.Brokers(), "payments.outbox", 15) > 0);
        }
    }
    REQUIRE(rig.WaitQuiet(std::chrono::seconds(180)));
    CHECK(sagaflow::testing::Redeliver(rig.DbUrl(), rig.Brokers(), "outbox", 40) > 0);
    CHECK(sagaflow::testing::Redeliver(rig.DbUrl(), rig.Brokers(), "payments.outbox", 40) > 0);
    REQUIRE(rig.WaitQuiet(std::chrono::seconds(60)));
    // No saga compensated without a participant's failure: exactly the declined ones.
    CHECK(Count(rig.DbUrl(), "SELECT count(*) FROM saga_instance WHERE status = 'completed'") == kSagas - declined);
    CHECK(Count(rig.DbUrl(), "SELECT count(*) FROM saga_instance WHERE status = 'compensated'") == declined);
    // One charge per completed order, none for the declined, nothing refunded.
    CHECK(Count(rig.DbUrl(), "SELECT count(*) FROM payments.payment WHERE status = 'charged'") == kSagas - declined);
    CHECK(Count(rig.DbUrl(), "SELECT count(*) FROM payments.refund") == 0);
    // The redelivered commands reached the TypeScript service's inbox as repeats of ids it had.
    CHECK(Count(rig.DbUrl(), "SELECT count(*) FROM payments.participant_step WHERE phase = 'action'") == kSagas);
    const auto report = rig.Audit();
    INFO(report.Summary());
    CHECK(report.Ok());
}

TEST_CASE("kafkajs's default partitioner puts every key where sagaflow's producers do (murmur2)") {
    // The relay's real partitions equal outbox::KeyPartition (outbox_itest); here kafkajs, the
    // TypeScript service's client, is asked for the same keys.
    const std::string dist = sagaflow::testing::RequiredEnv("SAGAFLOW_PAYMENT_TS");
    const std::string modules = dist.substr(0, dist.rfind("/dist/")) + "/node_modules";
    std::vector<std::string> keys;
    for (int i = 0; i < 200; ++i) keys.push_back(sagaflow::outbox::NewUuidV7());
    keys.emplace_back("21");
    keys.emplace_back("a-little-bit-longer-string");
    std::string script =
        "const p = require('kafkajs').Partitioners.DefaultPartitioner();"
        "const meta = [...Array(6).keys()].map((id) => ({partitionId: id, leader: 0}));"
        "for (const key of process.argv.slice(1)) console.log(p({topic: 't', partitionMetadata: meta, message: "
        "{key}}));";
    std::string command = "NODE_PATH='" + modules + "' node -e \"" + script + "\"";
    for (const auto& key : keys) command += " '" + key + "'";
    FILE* pipe = popen(command.c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::vector<int> partitions;
    char line[64];
    while (fgets(line, sizeof line, pipe) != nullptr) partitions.push_back(std::atoi(line));
    CHECK(pclose(pipe) == 0);
    REQUIRE(partitions.size() == keys.size());
    int elsewhere = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
        if (partitions[i] != sagaflow::outbox::KeyPartition(keys[i], 6)) ++elsewhere;
    }
    CHECK(elsewhere == 0);
}
