#pragma once
// An embedded Kafka: librdkafka's mock cluster, in this process, reachable over TCP on 127.0.0.1 by
// any client (other processes too). For the demo's default and for fault injection; tests of
// behaviour use a real broker. It keeps everything in memory and does not persist across restarts
// of the hosting process.

#include <memory>
#include <string>
#include <vector>

namespace sagaflow::outbox {

class EmbeddedKafka {
  public:
    explicit EmbeddedKafka(int brokers = 1);
    ~EmbeddedKafka();
    EmbeddedKafka(const EmbeddedKafka&) = delete;
    EmbeddedKafka& operator=(const EmbeddedKafka&) = delete;

    // The bootstrap servers, e.g. "127.0.0.1:39123".
    const std::string& Brokers() const noexcept;
    // Creates the topics (the mock cluster has no admin API for them).
    void CreateTopics(const std::vector<std::string>& topics, int partitions);

  private:
    class Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sagaflow::outbox
