#include "tests/support/kafka_read.hpp"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <thread>

#include "outbox/detail/rdkafka.hpp"
#include "tests/support/services.hpp"

namespace sagaflow::testing {

std::vector<ReadRecord> ReadTopic(const std::string& brokers,
                                  const std::string& topic,
                                  std::size_t expected,
                                  std::chrono::seconds timeout) {
    using namespace outbox::detail;
    // Partitions assigned directly, from the first offset: nothing joins a consumer group (the
    // group.id only names the client), so a group coordinator that is busy or stuck (the mock
    // cluster's, after a test's own consumer left its group) cannot keep the reader from the records.
    auto consumer = MakeClient(RD_KAFKA_CONSUMER,
                               MakeConf({{"bootstrap.servers", brokers},
                                         {"group.id", UniqueName("reader")},
                                         {"enable.auto.commit", "false"},
                                         {"allow.auto.create.topics", "false"}}));
    rd_kafka_poll_set_consumer(consumer.get());
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    // The topic's partitions, once it exists (it may be created by the first produce).
    std::vector<int> partitions;
    rd_kafka_topic_t* handle = rd_kafka_topic_new(consumer.get(), topic.c_str(), nullptr);
    while (partitions.empty() && std::chrono::steady_clock::now() < deadline) {
        const rd_kafka_metadata_t* metadata = nullptr;
        if (rd_kafka_metadata(consumer.get(), 0, handle, &metadata, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            metadata->topic_cnt == 1 && metadata->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            for (int i = 0; i < metadata->topics[0].partition_cnt; ++i) {
                partitions.push_back(metadata->topics[0].partitions[i].id);
            }
        }
        if (metadata != nullptr) rd_kafka_metadata_destroy(metadata);
        if (partitions.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    rd_kafka_topic_destroy(handle);
    if (partitions.empty()) return {};
    if (expected == 0) {
        for (const int partition : partitions) {
            std::int64_t low = 0;
            std::int64_t high = 0;
            rd_kafka_query_watermark_offsets(consumer.get(), topic.c_str(), partition, &low, &high, 10000);
            expected += static_cast<std::size_t>(high - low);
        }
        if (expected == 0) return {};
    }
    TopicPartitionListPtr assignment{rd_kafka_topic_partition_list_new(static_cast<int>(partitions.size()))};
    for (const int partition : partitions) {
        rd_kafka_topic_partition_list_add(assignment.get(), topic.c_str(), partition)->offset =
            RD_KAFKA_OFFSET_BEGINNING;
    }
    rd_kafka_assign(consumer.get(), assignment.get());
    std::vector<ReadRecord> records;
    while (records.size() < expected && std::chrono::steady_clock::now() < deadline) {
        MessagePtr message{rd_kafka_consumer_poll(consumer.get(), 200)};
        if (!message || message->err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
        ReadRecord record;
        if (message->key) record.key.assign(static_cast<const char*>(message->key), message->key_len);
        if (message->payload) record.value.assign(static_cast<const char*>(message->payload), message->len);
        record.partition = message->partition;
        record.offset = message->offset;
        for (auto& [name, value] : MessageHeaders(message.get())) record.headers[name] = std::move(value);
        records.push_back(std::move(record));
    }
    rd_kafka_consumer_close(consumer.get());
    return records;
}

}  // namespace sagaflow::testing

namespace sagaflow::testing {

EventStream AuditEventStream(const std::vector<ReadRecord>& records) {
    EventStream stream;
    std::map<std::string, int> next_seq;
    for (const auto& record : records) {
        const auto value = nlohmann::json::parse(record.value);
        const auto [it, fresh] = stream.value_of.emplace(value["id"].get<std::string>(), record.value);
        if (!fresh) {
            ++stream.duplicates;
            stream.changed_duplicates += it->second == record.value ? 0 : 1;
            continue;
        }
        if (!value["data"].contains("seq")) continue;
        const int seq = value["data"]["seq"].get<int>();
        stream.out_of_order += seq == next_seq[record.key] ? 0 : 1;
        next_seq[record.key] = seq + 1;
    }
    return stream;
}

}  // namespace sagaflow::testing
