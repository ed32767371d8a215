#pragma once
// How a consumer takes part in its group, by default: static membership (KIP-345) under an id that
// is stable across restarts of the same replica, and incremental cooperative rebalancing.
//
// Why both: with the eager protocol a member that dies keeps its partitions until its session
// times out, and any join makes every member give up all of its partitions until the group has
// settled — the whole group stops consuming for up to a session timeout. Cooperative rebalancing
// moves only the partitions that change owner; static membership lets a restarted replica rejoin
// under its old id and take its partitions back without any rebalance at all.

#include <memory>
#include <string>

#include "outbox/kafka.hpp"

namespace sagaflow::outbox {

// The defaults sagaflow's consumers start from; the user's properties override each of them.
//   partition.assignment.strategy  cooperative-sticky
//   session.timeout.ms             10000  (a dead member's partitions move on after this)
//   heartbeat.interval.ms          2000
//   reconnect.backoff.max.ms       1000   (back on a broker within a second of its return)
inline constexpr const char* kDefaultSessionTimeoutMs = "10000";
void ApplyGroupDefaults(KafkaProperties& properties);

// A `group.instance.id` for a replica that has none configured: "<host>-<slot>", where the slot is
// the lowest number not taken by a live process of the same group on this host (an flock(2) on a
// file under $TMPDIR/sagaflow-members, released by the kernel when the process dies). A replica
// restarted after a crash gets its old slot — and its partitions — back; two replicas on one host
// never share an id; in a container (its own host name and /tmp) the id is "<pod name>-0".
// Keep the returned object alive as long as the consumer uses the id.
class InstanceSlot {
  public:
    static std::unique_ptr<InstanceSlot> Claim(const std::string& group);
    ~InstanceSlot();
    InstanceSlot(const InstanceSlot&) = delete;
    InstanceSlot& operator=(const InstanceSlot&) = delete;
    const std::string& Id() const { return id_; }

  private:
    InstanceSlot(std::string id, int fd) : id_(std::move(id)), fd_(fd) {}
    std::string id_;
    int fd_ = -1;
};

}  // namespace sagaflow::outbox
