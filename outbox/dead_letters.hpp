#pragma once
// What the consumers moved to a `<topic>.dlq` topic, for an operator: read it back with the reason
// and origin of each record (`sagaflow dlq TOPIC.dlq`) and, once the cause is fixed, send records
// back where they came from (`--replay`). Replaying is safe: a consumer's inbox drops an event id
// it applied, and a participant answers a repeated step command with its stored reply.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "outbox/kafka.hpp"

namespace sagaflow::outbox {

struct DeadLetter {
    std::int32_t partition = 0;  // where it is in the .dlq topic
    std::int64_t offset = 0;
    std::string origin;        // sagaflow-dlq-origin: "<topic>/<partition>@<offset>" it was consumed at
    std::string origin_topic;  // the topic part of `origin`
    std::string reason;        // sagaflow-dlq-reason
    std::string key;
    std::string value;                           // the record as it came; empty when omitted
    std::optional<std::uint64_t> omitted_size;   // sagaflow-dlq-value-omitted: too large to copy
    std::map<std::string, std::string> headers;  // the record's own headers (no sagaflow-dlq-*)
};

// Every record in `topic` up to its end at the time of the call, in partition and offset order.
// KafkaError if the topic does not exist or the broker does not answer within `timeout`.
std::vector<DeadLetter> ReadDeadLetters(const std::string& brokers,
                                        const std::string& topic,
                                        const KafkaProperties& properties,
                                        std::chrono::seconds timeout);

struct ReplayReport {
    std::size_t replayed = 0;
    std::size_t skipped = 0;  // no value (omitted: the origin still holds it) or no origin
};

// Produces each letter's key, value and own headers to its origin topic with an idempotent
// producer (acks=all) and waits for the broker to acknowledge all of them; KafkaError otherwise.
ReplayReport ReplayDeadLetters(const std::string& brokers,
                               const std::vector<DeadLetter>& letters,
                               const KafkaProperties& properties);

}  // namespace sagaflow::outbox
