#pragma once
// RAII holders for librdkafka's C handles (internal: includes librdkafka). Zero-size deleters, so a
// holder is exactly one pointer.

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/kafka.hpp"

namespace sagaflow::outbox::detail {

struct ConfDeleter {
    void operator()(rd_kafka_conf_t* conf) const noexcept { rd_kafka_conf_destroy(conf); }
};
struct ClientDeleter {
    // Destroy only: a producer's bounded flush and a consumer's close belong to their owners, which
    // know how long they may wait.
    void operator()(rd_kafka_t* client) const noexcept { rd_kafka_destroy(client); }
};
struct TopicPartitionListDeleter {
    void operator()(rd_kafka_topic_partition_list_t* list) const noexcept {
        rd_kafka_topic_partition_list_destroy(list);
    }
};
struct MessageDeleter {
    void operator()(rd_kafka_message_t* message) const noexcept { rd_kafka_message_destroy(message); }
};
struct HeadersDeleter {
    void operator()(rd_kafka_headers_t* headers) const noexcept { rd_kafka_headers_destroy(headers); }
};
struct QueueDeleter {
    void operator()(rd_kafka_queue_t* queue) const noexcept { rd_kafka_queue_destroy(queue); }
};

using ConfPtr = std::unique_ptr<rd_kafka_conf_t, ConfDeleter>;
using ClientPtr = std::unique_ptr<rd_kafka_t, ClientDeleter>;
using TopicPartitionListPtr = std::unique_ptr<rd_kafka_topic_partition_list_t, TopicPartitionListDeleter>;
using MessagePtr = std::unique_ptr<rd_kafka_message_t, MessageDeleter>;
using HeadersPtr = std::unique_ptr<rd_kafka_headers_t, HeadersDeleter>;
using QueuePtr = std::unique_ptr<rd_kafka_queue_t, QueueDeleter>;

// A configuration holding every property; a refused property throws KafkaError naming it.
ConfPtr MakeConf(const KafkaProperties& properties);

// The configuration of a producer: as MakeConf, with the Java client's partitioner
// (`partitioner=murmur2_random`, kKeyPartitioner) unless `properties` name one. Every sagaflow
// producer uses it, so a key lands in the partition kafkajs, the Java client and librdkafka agree on,
// and a saga's messages keep their order whichever language produced them.
inline constexpr const char* kKeyPartitioner = "murmur2_random";
ConfPtr MakeProducerConf(KafkaProperties properties);

// A record's headers in order, name and value (an empty value for a null one); repeated names repeat.
std::vector<std::pair<std::string, std::string>> MessageHeaders(const rd_kafka_message_t* message);

// Sets one property; throws KafkaError naming the key and librdkafka's reason.
void SetProperty(rd_kafka_conf_t* conf, const std::string& key, const std::string& value);

// Creates a producer or consumer. librdkafka takes the configuration only on success, so `conf` is
// released only then; on failure it is destroyed by its holder and KafkaError is thrown.
ClientPtr MakeClient(rd_kafka_type_t type, ConfPtr conf);

// Enqueues one message, copying key and value, to any partition the key hashes to. On success
// librdkafka owns `headers` (may be null); on failure they stay with the caller. `opaque` comes back
// in the delivery report. RD_KAFKA_RESP_ERR__QUEUE_FULL means: poll, then try again.
rd_kafka_resp_err_t Produce(rd_kafka_t* producer,
                            const std::string& topic,
                            std::string_view key,
                            std::string_view value,
                            rd_kafka_headers_t* headers,
                            void* opaque);

// The text of a librdkafka error code.
std::string ErrorText(rd_kafka_resp_err_t err);

// The client's fatal error (rd_kafka_fatal_error), or empty while it has none. A client with one
// never works again: its owner replaces it.
std::string FatalError(rd_kafka_t* client);

// Sleeps `duration` in 20 ms slices, returning early once `stopping` is set (the relay's and the
// consumer's back-offs, so Stop() is seen quickly).
void SleepUnless(const std::atomic<bool>& stopping, std::chrono::milliseconds duration);

}  // namespace sagaflow::outbox::detail
