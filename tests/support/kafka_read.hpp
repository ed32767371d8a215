#pragma once
// Reads a topic from the beginning with a fresh consumer group: what a user would see on it.

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace sagaflow::testing {

struct ReadRecord {
    std::string key;
    std::string value;
    std::map<std::string, std::string> headers;
    int partition = 0;
    long long offset = 0;
};

// Reads until `expected` records arrived or `timeout` passed (then returns what it has). With
// expected == 0: reads everything up to the partitions' high watermarks as of the call.
std::vector<ReadRecord> ReadTopic(const std::string& brokers,
                                  const std::string& topic,
                                  std::size_t expected,
                                  std::chrono::seconds timeout);

}  // namespace sagaflow::testing

namespace sagaflow::testing {

// What a stream of CloudEvents on a topic shows: each event id once (first occurrence), how many
// records repeated an id, how many of those differed in bytes (must be none), and how many first
// occurrences broke the per-key order of data.seq (when the events carry one).
struct EventStream {
    std::map<std::string, std::string> value_of;  // event id -> record value
    int duplicates = 0;
    int changed_duplicates = 0;
    int out_of_order = 0;
};

EventStream AuditEventStream(const std::vector<ReadRecord>& records);

}  // namespace sagaflow::testing
