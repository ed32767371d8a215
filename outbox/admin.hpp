#pragma once
// Topic administration: the engine makes sure the topics it uses exist before it subscribes, so a
// fresh cluster (or one with auto-creation off) works without a manual step.

#include <chrono>
#include <string>
#include <vector>

#include "outbox/kafka.hpp"

namespace sagaflow::outbox {

// Creates each topic with `partitions` partitions (replication factor: the broker's default) unless
// it exists already, then waits until every partition of every topic has a leader. Blocking; for
// startup. Throws KafkaError naming the topic and the broker's reason.
void EnsureTopicsBlocking(const std::string& brokers,
                          const KafkaProperties& properties,
                          const std::vector<std::string>& topics,
                          int partitions);

// True when a broker answers a metadata request within `timeout` (readiness checks).
bool BrokersReachableBlocking(const std::string& brokers,
                              const KafkaProperties& properties,
                              std::chrono::milliseconds timeout);

}  // namespace sagaflow::outbox
