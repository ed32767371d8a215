#pragma once
// Public Kafka vocabulary of the outbox module. Free of librdkafka types so that embedding services
// do not inherit <librdkafka/rdkafka.h>.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sagaflow::outbox {

// librdkafka properties as given by the user (`kafka.properties` in the config): passed through
// verbatim, so TLS and SASL settings need no support of ours.
using KafkaProperties = std::map<std::string, std::string>;

// A startup or configuration error of a Kafka client: the message names the cause and a hint.
class KafkaError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// "KEY=VALUE" strings (command-line flags) as properties; KafkaError naming the bad one otherwise.
KafkaProperties ParseKafkaProperties(const std::vector<std::string>& pairs);

// The partition the Java client, kafkajs's default partitioner and librdkafka's murmur2 partitioners
// (every sagaflow producer: partitioner=murmur2_random) give a record key: murmur2 of its bytes, made
// positive, modulo `partitions`. Murmur2 is the Java client's Utils.murmur2.
std::int32_t Murmur2(std::string_view key);
int KeyPartition(std::string_view key, int partitions);

// librdkafka's reason for refusing `key` = `value` (an unknown key, a value out of its range), or
// nullopt when it takes it. Checks the property alone, as the configuration file is read.
std::optional<std::string> KafkaPropertyError(const std::string& key, const std::string& value);

// `properties` without the ones librdkafka documents as consumer-only (group.id,
// group.instance.id, session.timeout.ms, fetch.*, ...): what a producer beside a consumer (its
// dead letters) takes from the consumer's settings, so librdkafka does not warn that it ignores them.
KafkaProperties WithoutConsumerProperties(KafkaProperties properties);

}  // namespace sagaflow::outbox
