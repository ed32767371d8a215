#include "outbox/dead_letters.hpp"

#include <unistd.h>
#include <algorithm>
#include <atomic>

#include "outbox/detail/rdkafka.hpp"

namespace sagaflow::outbox {
namespace {

constexpr std::string_view kReasonHeader = "sagaflow-dlq-reason";
constexpr std::string_view kOriginHeader = "sagaflow-dlq-origin";
constexpr std::string_view kOmittedHeader = "sagaflow-dlq-value-omitted";

KafkaProperties With(KafkaProperties properties, const std::string& brokers) {
    properties["bootstrap.servers"] = brokers;
    return properties;
}

DeadLetter ToLetter(const rd_kafka_message_t* message) {
    DeadLetter letter;
    letter.partition = message->partition;
    letter.offset = message->offset;
    if (message->key != nullptr) letter.key.assign(static_cast<const char*>(message->key), message->key_len);
    if (message->payload != nullptr) letter.value.assign(static_cast<const char*>(message->payload), message->len);
    for (const auto& [name, text] : detail::MessageHeaders(message)) {
        if (name == kReasonHeader) {
            letter.reason = text;
        } else if (name == kOriginHeader) {
            letter.origin = text;
            letter.origin_topic = text.substr(0, text.rfind('/'));
        } else if (name == kOmittedHeader) {
            letter.omitted_size = std::stoull(text);
        } else {
            letter.headers[name] = text;
        }
    }
    return letter;
}

}  // namespace

std::vector<DeadLetter> ReadDeadLetters(const std::string& brokers,
                                        const std::string& topic,
                                        const KafkaProperties& properties,
                                        std::chrono::seconds timeout) {
    using namespace detail;
    auto conf = With(properties, brokers);
    conf["group.id"] = "sagaflow-dlq-reader-" + std::to_string(::getpid());  // assigned, never joined
    conf["enable.auto.commit"] = "false";
    conf["enable.partition.eof"] = "false";
    auto consumer = MakeClient(RD_KAFKA_CONSUMER, MakeConf(conf));
    const auto wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());

    // Where each partition ends now: read up to there.
    const rd_kafka_metadata_t* metadata = nullptr;
    rd_kafka_topic_t* handle = rd_kafka_topic_new(consumer.get(), topic.c_str(), nullptr);
    const auto err = rd_kafka_metadata(consumer.get(), 0, handle, &metadata, wait_ms);
    rd_kafka_topic_destroy(handle);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        throw KafkaError("cannot read the metadata of " + topic + " from " + brokers + ": " + ErrorText(err) +
                         ". Hint: check the brokers and kafka.properties (TLS, SASL)");
    }
    std::map<std::int32_t, std::int64_t> end;
    TopicPartitionListPtr assignment{rd_kafka_topic_partition_list_new(8)};
    const bool known = metadata->topic_cnt == 1 && metadata->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int i = 0; known && i < metadata->topics[0].partition_cnt; ++i) {
        const std::int32_t partition = metadata->topics[0].partitions[i].id;
        std::int64_t low = 0;
        std::int64_t high = 0;
        const auto watermarks =
            rd_kafka_query_watermark_offsets(consumer.get(), topic.c_str(), partition, &low, &high, wait_ms);
        if (watermarks != RD_KAFKA_RESP_ERR_NO_ERROR) {
            rd_kafka_metadata_destroy(metadata);
            throw KafkaError("cannot read where " + topic + "/" + std::to_string(partition) +
                             " ends: " + ErrorText(watermarks));
        }
        if (high > low) {
            end[partition] = high;
            rd_kafka_topic_partition_list_add(assignment.get(), topic.c_str(), partition)->offset = low;
        }
    }
    rd_kafka_metadata_destroy(metadata);
    if (!known) {
        throw KafkaError("no topic " + topic + " on " + brokers +
                         ". Hint: a consumer creates <topic>.dlq with its first dead letter; none so far?");
    }
    std::vector<DeadLetter> letters;
    if (end.empty()) return letters;
    rd_kafka_assign(consumer.get(), assignment.get());
    std::map<std::int32_t, std::int64_t> next;  // the offset after the last one read, per partition
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const auto done = [&] {
        return std::all_of(end.begin(), end.end(), [&](const auto& e) { return next[e.first] >= e.second; });
    };
    while (!done()) {
        if (std::chrono::steady_clock::now() >= deadline) {
            throw KafkaError("reading " + topic + " took longer than " + std::to_string(timeout.count()) + " s");
        }
        MessagePtr message{rd_kafka_consumer_poll(consumer.get(), 200)};
        if (!message) continue;
        if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            throw KafkaError("reading " + topic + ": " + rd_kafka_message_errstr(message.get()));
        }
        next[message->partition] = message->offset + 1;
        if (message->offset < end[message->partition]) letters.push_back(ToLetter(message.get()));
    }
    rd_kafka_consumer_close(consumer.get());
    std::sort(letters.begin(), letters.end(), [](const DeadLetter& a, const DeadLetter& b) {
        return std::tie(a.partition, a.offset) < std::tie(b.partition, b.offset);
    });
    return letters;
}

ReplayReport ReplayDeadLetters(const std::string& brokers,
                               const std::vector<DeadLetter>& letters,
                               const KafkaProperties& properties) {
    using namespace detail;
    auto conf = With(properties, brokers);
    conf["enable.idempotence"] = "true";  // acks=all; a retry is never a second copy
    std::atomic<std::size_t> failed{0};
    std::string first_error;
    auto producer_conf = MakeProducerConf(conf);
    struct Failures {
        std::atomic<std::size_t>* count;
        std::string* first;
    } failures{&failed, &first_error};
    rd_kafka_conf_set_opaque(producer_conf.get(), &failures);
    rd_kafka_conf_set_dr_msg_cb(producer_conf.get(), [](rd_kafka_t*, const rd_kafka_message_t* message, void* opaque) {
        if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR) return;
        auto* f = static_cast<Failures*>(opaque);
        if ((*f->count)++ == 0) *f->first = rd_kafka_err2str(message->err);
    });
    auto producer = MakeClient(RD_KAFKA_PRODUCER, std::move(producer_conf));
    ReplayReport report;
    for (const auto& letter : letters) {
        if (letter.value.empty() || letter.origin_topic.empty()) {
            ++report.skipped;
            continue;
        }
        HeadersPtr headers{rd_kafka_headers_new(letter.headers.size() + 1)};
        for (const auto& [name, value] : letter.headers) {
            rd_kafka_header_add(headers.get(),
                                name.data(),
                                static_cast<ssize_t>(name.size()),
                                value.data(),
                                static_cast<ssize_t>(value.size()));
        }
        rd_kafka_resp_err_t err;
        while ((err = Produce(producer.get(), letter.origin_topic, letter.key, letter.value, headers.get(), nullptr)) ==
               RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(producer.get(), 10);
        }
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            throw KafkaError("cannot replay " + letter.origin + " to " + letter.origin_topic + ": " + ErrorText(err));
        }
        static_cast<void>(headers.release());  // librdkafka owns them now
        ++report.replayed;
    }
    if (rd_kafka_flush(producer.get(), 30'000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        throw KafkaError("the broker did not acknowledge the replayed records within 30 s: some may be missing");
    }
    if (failed.load() != 0) {
        throw KafkaError(std::to_string(failed.load()) + " replayed record(s) refused by the broker: " + first_error);
    }
    return report;
}

}  // namespace sagaflow::outbox
