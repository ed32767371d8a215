// Proves the test broker is a real Kafka: an idempotent producer obtains a producer id from it, and a
// consumer group reads back every message in per-key order.
#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "outbox/detail/rdkafka.hpp"
#include "tests/support/services.hpp"

using namespace sagaflow::outbox::detail;
using sagaflow::testing::CreateTopic;
using sagaflow::testing::KafkaBrokers;
using sagaflow::testing::UniqueName;

namespace {

constexpr int kMessages = 10'000;
constexpr int kKeys = 100;

struct ProducerState {
    std::atomic<int> delivered{0};
    std::atomic<int> failed{0};
    std::mutex mutex;
    nlohmann::json eos;  // the "eos" object of the latest statistics
};

void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* message, void* opaque) {
    auto* state = static_cast<ProducerState*>(opaque);
    (message->err == RD_KAFKA_RESP_ERR_NO_ERROR ? state->delivered : state->failed).fetch_add(1);
}

int OnStatistics(rd_kafka_t*, char* json, size_t json_len, void* opaque) {
    auto* state = static_cast<ProducerState*>(opaque);
    auto stats = nlohmann::json::parse(json, json + json_len, nullptr, false);
    if (stats.is_object() && stats.contains("eos")) {
        std::lock_guard lock{state->mutex};
        state->eos = stats["eos"];
    }
    return 0;  // librdkafka frees `json`
}

}  // namespace

TEST_CASE("idempotent producer and consumer group against the real broker") {
    const std::string brokers = KafkaBrokers();
    const std::string topic = UniqueName("smoke");
    CreateTopic(brokers, topic, 4);

    ProducerState state;
    auto conf = MakeConf({{"bootstrap.servers", brokers},
                          {"enable.idempotence", "true"},
                          {"acks", "all"},
                          {"linger.ms", "5"},
                          {"statistics.interval.ms", "100"}});
    rd_kafka_conf_set_dr_msg_cb(conf.get(), OnDelivery);
    rd_kafka_conf_set_stats_cb(conf.get(), OnStatistics);
    rd_kafka_conf_set_opaque(conf.get(), &state);
    auto producer = MakeClient(RD_KAFKA_PRODUCER, std::move(conf));

    for (int i = 0; i < kMessages; ++i) {
        const std::string key = "key-" + std::to_string(i % kKeys);
        const std::string value = std::to_string(i / kKeys);  // per-key sequence number
        rd_kafka_resp_err_t err;
        while ((err = Produce(producer.get(), topic, key, value, nullptr, nullptr)) == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(producer.get(), 10);
        }
        REQUIRE(err == RD_KAFKA_RESP_ERR_NO_ERROR);
        rd_kafka_poll(producer.get(), 0);
    }
    REQUIRE(rd_kafka_flush(producer.get(), 60'000) == RD_KAFKA_RESP_ERR_NO_ERROR);
    CHECK(state.delivered.load() == kMessages);
    CHECK(state.failed.load() == 0);

    // The producer id is assigned by the broker (InitProducerId); -1 would mean idempotence is off.
    long long producer_id = -1;
    std::string idemp_state;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
        rd_kafka_poll(producer.get(), 100);
        std::lock_guard lock{state.mutex};
        if (state.eos.is_object()) {
            producer_id = state.eos.value("producer_id", -1LL);
            idemp_state = state.eos.value("idemp_state", "");
            if (producer_id >= 0) {
                break;
            }
        }
    }
    CHECK(idemp_state == "Assigned");
    CHECK(producer_id >= 0);

    auto consumer_conf = MakeConf({{"bootstrap.servers", brokers},
                                   {"group.id", UniqueName("smoke-group")},
                                   {"auto.offset.reset", "earliest"},
                                   {"enable.auto.commit", "false"}});
    auto consumer = MakeClient(RD_KAFKA_CONSUMER, std::move(consumer_conf));
    rd_kafka_poll_set_consumer(consumer.get());
    TopicPartitionListPtr subscription{rd_kafka_topic_partition_list_new(1)};
    rd_kafka_topic_partition_list_add(subscription.get(), topic.c_str(), RD_KAFKA_PARTITION_UA);
    REQUIRE(rd_kafka_subscribe(consumer.get(), subscription.get()) == RD_KAFKA_RESP_ERR_NO_ERROR);

    std::map<std::string, int> next_sequence;
    int received = 0;
    int out_of_order = 0;
    const auto read_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (received < kMessages && std::chrono::steady_clock::now() < read_deadline) {
        MessagePtr message{rd_kafka_consumer_poll(consumer.get(), 500)};
        if (!message || message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            continue;
        }
        REQUIRE_MESSAGE(message->err == RD_KAFKA_RESP_ERR_NO_ERROR, rd_kafka_message_errstr(message.get()));
        const std::string key(static_cast<const char*>(message->key), message->key_len);
        const int sequence = std::stoi(std::string(static_cast<const char*>(message->payload), message->len));
        out_of_order += sequence == next_sequence[key] ? 0 : 1;
        next_sequence[key] = sequence + 1;
        ++received;
    }
    CHECK(received == kMessages);
    CHECK(out_of_order == 0);
    CHECK(next_sequence.size() == static_cast<size_t>(kKeys));
    // The group coordinator accepts the offsets: consumer groups really work on this broker.
    CHECK(rd_kafka_commit(consumer.get(), nullptr, 0) == RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_consumer_close(consumer.get());
}
