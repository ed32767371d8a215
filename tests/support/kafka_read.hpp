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
