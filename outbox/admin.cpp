#include "outbox/admin.hpp"

#include <array>
#include <chrono>
#include <thread>

#include "outbox/detail/rdkafka.hpp"

namespace sagaflow::outbox {
namespace {

void CreateOne(rd_kafka_t* client, const std::string& topic, int partitions) {
    std::array<char, 512> errstr{};
    // -1: the broker's default.replication.factor.
    rd_kafka_NewTopic_t* new_topic = rd_kafka_NewTopic_new(topic.c_str(), partitions, -1, errstr.data(), errstr.size());
    if (new_topic == nullptr) throw KafkaError("cannot describe topic " + topic + ": " + errstr.data());
    detail::QueuePtr queue{rd_kafka_queue_new(client)};
    rd_kafka_CreateTopics(client, &new_topic, 1, nullptr, queue.get());
    rd_kafka_event_t* event = rd_kafka_queue_poll(queue.get(), 30'000);
    rd_kafka_NewTopic_destroy(new_topic);
    if (event == nullptr) {
        throw KafkaError("creating topic " + topic +
                         " got no answer within 30 s. Hint: check that the brokers are reachable");
    }
    std::string error;
    size_t count = 0;
    const rd_kafka_topic_result_t** results =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(event), &count);
    if (rd_kafka_event_error(event) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        error = rd_kafka_event_error_string(event);
    } else if (count == 1 && rd_kafka_topic_result_error(results[0]) != RD_KAFKA_RESP_ERR_NO_ERROR &&
               rd_kafka_topic_result_error(results[0]) != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
        error = rd_kafka_topic_result_error_string(results[0]);
    }
    rd_kafka_event_destroy(event);
    if (!error.empty()) {
        throw KafkaError("creating topic " + topic + " failed: " + error +
                         ". Hint: create it yourself, or grant the engine's principal CREATE on the cluster");
    }
}

bool HasLeaders(rd_kafka_t* client, const std::string& topic) {
    const rd_kafka_metadata_t* metadata = nullptr;
    rd_kafka_topic_t* handle = rd_kafka_topic_new(client, topic.c_str(), nullptr);
    const bool ok = rd_kafka_metadata(client, 0, handle, &metadata, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_topic_destroy(handle);
    bool ready = ok && metadata->topic_cnt == 1 && metadata->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
                 metadata->topics[0].partition_cnt > 0;
    for (int i = 0; ready && i < metadata->topics[0].partition_cnt; ++i) {
        ready = metadata->topics[0].partitions[i].leader >= 0;
    }
    if (metadata != nullptr) rd_kafka_metadata_destroy(metadata);
    return ready;
}

}  // namespace

void EnsureTopicsBlocking(const std::string& brokers,
                          const KafkaProperties& properties,
                          const std::vector<std::string>& topics,
                          int partitions) {
    auto props = properties;
    props["bootstrap.servers"] = brokers;
    auto client = detail::MakeClient(RD_KAFKA_PRODUCER, detail::MakeConf(props));
    for (const auto& topic : topics) CreateOne(client.get(), topic, partitions);
    // Wait until every partition has a leader, so the first produce or subscribe does not race the
    // creation.
    for (const auto& topic : topics) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!HasLeaders(client.get(), topic)) {
            if (std::chrono::steady_clock::now() > deadline) {
                throw KafkaError("topic " + topic + " has no leaders 30 s after its creation");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }
}

bool BrokersReachableBlocking(const std::string& brokers,
                              const KafkaProperties& properties,
                              std::chrono::milliseconds timeout) {
    auto props = properties;
    props["bootstrap.servers"] = brokers;
    props["log_level"] = "0";  // an unreachable broker is the answer here, not a log line
    auto client = detail::MakeClient(RD_KAFKA_PRODUCER, detail::MakeConf(props));
    const rd_kafka_metadata_t* metadata = nullptr;
    const auto err = rd_kafka_metadata(client.get(), 0, nullptr, &metadata, static_cast<int>(timeout.count()));
    if (metadata != nullptr) rd_kafka_metadata_destroy(metadata);
    return err == RD_KAFKA_RESP_ERR_NO_ERROR;
}

}  // namespace sagaflow::outbox
