#pragma once
// What consumer groups have read, as Kafka itself records it: each followed group's committed
// offsets on a topic, fetched every `interval` by a thread of its own, kept with the time each was
// first seen. The engine asks it two questions before it lets a step time out (engine/README.md,
// "Two clocks"):
//   - has the participant's group read this command (its partition and offset, from the relay's
//     delivery report), and since when?
//   - has the engine's own group read every reply written before a given moment?
// Answers are ages ("read at least this long ago"), measured on this process's steady clock, so no
// clock of another machine enters them. A group's offsets are committed after its database
// transaction (outbox/consumer.hpp) and at most auto.commit.interval.ms later, so "read" here
// means "applied"; an answer is at most interval + that interval late, never early.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "outbox/kafka.hpp"

namespace sagaflow::outbox {

class GroupProgress {
  public:
    // `min_history`: how long the committed offsets seen are kept beyond a group's horizon (below).
    GroupProgress(std::string brokers,
                  KafkaProperties properties,
                  std::chrono::milliseconds interval = std::chrono::milliseconds(500),
                  std::chrono::milliseconds min_history = std::chrono::minutes(1));
    ~GroupProgress();
    GroupProgress(const GroupProgress&) = delete;
    GroupProgress& operator=(const GroupProgress&) = delete;

    // Follows `group` on `topic` (from the next fetch on). `caught_up`: also record the topic's
    // high watermarks, for CaughtUpAgo. `horizon`: how far back CommandRead's "ago" must be exact
    // (the longest step timeout it is compared with; the largest given counts). Each committed
    // offset seen is kept for the horizon plus `min_history`, at most kMaxHistory: an answer about
    // a read older than that may say it was read later than it was, never earlier.
    static constexpr std::chrono::minutes kMaxHistory{20};
    void Follow(const std::string& group,
                const std::string& topic,
                bool caught_up = false,
                std::chrono::milliseconds horizon = std::chrono::milliseconds(0));
    void Start();
    void Stop();

    // kNotYet: nothing fetched yet in the first kStartupGrace of the follower's life (an engine
    // that just restarted has not looked yet: ask again shortly). kUnknown: Kafka cannot say.
    enum class Read { kYes, kNo, kNotYet, kUnknown };
    static constexpr std::chrono::seconds kStartupGrace{30};
    struct ReadAnswer {
        Read read = Read::kUnknown;
        std::chrono::milliseconds ago{0};  // kYes: first seen committed past the offset this long ago
        std::string why;                   // kUnknown: why not known
    };
    // Whether `group` has reached the record at `offset` of `topic`[`partition`] (every record
    // before it applied). On a partition where the group has committed nothing yet, it has reached
    // the partition's first record (its log start): a new group's first command there is read,
    // not waited for. kUnknown when the group is not followed, nothing could be fetched within
    // the startup grace (e.g. no right to read the group's offsets), or the group has committed
    // nothing on the topic at all (not a sagaflow group, or misnamed: nothing to wait for).
    ReadAnswer CommandRead(const std::string& group,
                           const std::string& topic,
                           std::int32_t partition,
                           std::int64_t offset) const;
    // How long ago the latest moment lies before which every record of `topic` has been read by
    // `group`; milliseconds::max() while it has not caught up with any moment seen (or nothing is
    // fetched yet, within the startup grace); nullopt when Kafka cannot say (nothing fetched
    // after the grace, or not followed).
    std::optional<std::chrono::milliseconds> CaughtUpAgo(const std::string& group, const std::string& topic) const;

  private:
    class Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sagaflow::outbox
