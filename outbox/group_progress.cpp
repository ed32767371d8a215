#include "outbox/group_progress.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>

#include "outbox/detail/rdkafka.hpp"
#include "store/named_thread.hpp"

namespace sagaflow::outbox {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kFetchTimeoutMs = 2000;
constexpr auto kLowsMaxAge = std::chrono::seconds(30);

struct PartitionHistory {
    std::deque<std::pair<Clock::time_point, std::int64_t>> committed;  // appended when it changes
};

struct Track {
    std::string group, topic;
    bool caught_up = false;
    std::chrono::milliseconds horizon{0};  // see Follow
    int partitions = 0;
    Clock::time_point metadata_at{};
    std::vector<PartitionHistory> history;
    bool any_commit = false;  // the group has committed something on the topic
    std::optional<Clock::time_point> fetched_at;
    std::deque<std::pair<Clock::time_point, std::vector<std::int64_t>>> watermarks;  // caught_up only
    std::vector<std::int64_t> latest;  // committed, per partition (-1: none)
    std::string last_error;
};

std::chrono::milliseconds Ago(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t);
}

}  // namespace

class GroupProgress::Impl {
  public:
    Impl(std::string brokers,
         KafkaProperties properties,
         std::chrono::milliseconds interval,
         std::chrono::milliseconds min_history)
        : brokers_(std::move(brokers)),
          properties_(std::move(properties)),
          interval_(interval),
          min_history_(min_history) {}

    void Follow(const std::string& group, const std::string& topic, bool caught_up, std::chrono::milliseconds horizon) {
        std::lock_guard lock(mutex_);
        auto& track = tracks_[{group, topic}];
        track.group = group;
        track.topic = topic;
        track.caught_up = track.caught_up || caught_up;
        track.horizon = std::max(track.horizon, horizon);
    }

    void Start() {
        if (thread_.joinable()) return;
        started_at_ = Clock::now();
        stopping_ = false;
        thread_ = store::NamedThread("sf-progress", [this] { Run(); });
    }

    void Stop() {
        stopping_ = true;
        if (thread_.joinable()) thread_.join();
        clients_.clear();
    }

    ReadAnswer CommandRead(const std::string& group,
                           const std::string& topic,
                           std::int32_t partition,
                           std::int64_t offset) const {
        std::lock_guard lock(mutex_);
        const auto it = tracks_.find({group, topic});
        if (it == tracks_.end()) return {Read::kUnknown, {}, "group " + group + " is not followed on " + topic};
        const Track& track = it->second;
        if (!track.fetched_at) {
            return {InGrace() ? Read::kNotYet : Read::kUnknown,
                    {},
                    "the offsets of group " + group + " could not be fetched" +
                        (track.last_error.empty() ? "" : " (" + track.last_error + ")")};
        }
        if (!track.any_commit) return {Read::kUnknown, {}, "group " + group + " has committed nothing on " + topic};
        if (partition < 0 || partition >= static_cast<std::int32_t>(track.history.size())) {
            return {Read::kNo, {}, {}};
        }
        for (const auto& [at, committed] : track.history[static_cast<std::size_t>(partition)].committed) {
            if (committed >= offset) return {Read::kYes, Ago(at), {}};
        }
        return {Read::kNo, {}, {}};
    }

    std::optional<std::chrono::milliseconds> CaughtUpAgo(const std::string& group, const std::string& topic) const {
        std::lock_guard lock(mutex_);
        const auto it = tracks_.find({group, topic});
        if (it == tracks_.end() || !it->second.caught_up) return std::nullopt;
        const Track& track = it->second;
        if (!track.fetched_at && !InGrace()) return std::nullopt;
        for (auto w = track.watermarks.rbegin(); w != track.watermarks.rend(); ++w) {
            if (Covers(track.latest, w->second)) return Ago(w->first);
        }
        return std::chrono::milliseconds::max();
    }

  private:
    bool InGrace() const { return Clock::now() - started_at_ < kStartupGrace; }

    static bool Covers(const std::vector<std::int64_t>& committed, const std::vector<std::int64_t>& watermarks) {
        if (committed.size() < watermarks.size()) return false;
        for (std::size_t p = 0; p < watermarks.size(); ++p) {
            if (std::max<std::int64_t>(committed[p], 0) < watermarks[p]) return false;
        }
        return true;
    }

    void Run() {
        while (!stopping_.load()) {
            const auto started = Clock::now();
            std::vector<std::pair<std::string, std::string>> keys;
            {
                std::lock_guard lock(mutex_);
                for (const auto& [key, track] : tracks_) keys.push_back(key);
            }
            for (const auto& key : keys) {
                if (stopping_.load()) break;
                try {
                    Fetch(key);
                } catch (const std::exception& e) {
                    std::lock_guard lock(mutex_);
                    tracks_[key].last_error = e.what();
                }
            }
            const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
            detail::SleepUnless(stopping_, std::max(interval_ - spent, std::chrono::milliseconds(50)));
        }
    }

    rd_kafka_t* Client(const std::string& group) {
        auto& client = clients_[group];
        if (!client) {
            // A consumer that never subscribes: it only asks the group's coordinator for offsets.
            KafkaProperties properties = properties_;
            properties["bootstrap.servers"] = brokers_;
            properties["group.id"] = group;
            properties["enable.auto.commit"] = "false";
            properties.try_emplace("reconnect.backoff.max.ms", "1000");
            client = detail::MakeClient(RD_KAFKA_CONSUMER, detail::MakeConf(properties));
        }
        return client.get();
    }

    int PartitionCount(rd_kafka_t* client, const std::string& topic) {
        rd_kafka_topic_t* handle = rd_kafka_topic_new(client, topic.c_str(), nullptr);
        const rd_kafka_metadata_t* metadata = nullptr;
        const auto err = rd_kafka_metadata(client, 0, handle, &metadata, kFetchTimeoutMs);
        int count = 0;
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR && metadata->topic_cnt == 1 && metadata->topics[0].err == 0) {
            count = metadata->topics[0].partition_cnt;
        }
        if (metadata) rd_kafka_metadata_destroy(metadata);
        rd_kafka_topic_destroy(handle);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) throw std::runtime_error("metadata: " + detail::ErrorText(err));
        return count;
    }

    void Fetch(const std::pair<std::string, std::string>& key) {
        const auto& [group, topic] = key;
        rd_kafka_t* client = Client(group);
        int partitions = 0;
        bool caught_up = false;
        {
            std::lock_guard lock(mutex_);
            const Track& track = tracks_[key];
            partitions = track.partitions;
            caught_up = track.caught_up;
            if (Clock::now() - track.metadata_at > std::chrono::seconds(30)) partitions = 0;
        }
        if (partitions == 0) {
            partitions = PartitionCount(client, topic);
            if (partitions == 0) throw std::runtime_error("topic " + topic + " has no partitions yet");
            std::lock_guard lock(mutex_);
            tracks_[key].partitions = partitions;
            tracks_[key].metadata_at = Clock::now();
        }
        // Watermarks first, then the commits: a commit fetched after a watermark covers it only if
        // every record below the watermark was applied.
        const auto at = Clock::now();
        std::vector<std::int64_t> watermarks;
        if (caught_up) {
            for (int p = 0; p < partitions; ++p) {
                std::int64_t low = 0;
                std::int64_t high = 0;
                const auto err =
                    rd_kafka_query_watermark_offsets(client, topic.c_str(), p, &low, &high, kFetchTimeoutMs);
                if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
                    throw std::runtime_error("watermarks: " + detail::ErrorText(err));
                watermarks.push_back(high);
            }
        }
        detail::TopicPartitionListPtr list{rd_kafka_topic_partition_list_new(partitions)};
        for (int p = 0; p < partitions; ++p) rd_kafka_topic_partition_list_add(list.get(), topic.c_str(), p);
        if (const auto err = rd_kafka_committed(client, list.get(), kFetchTimeoutMs);
            err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            throw std::runtime_error("committed offsets: " + detail::ErrorText(err));
        }
        const auto& lows = LowWatermarks(client, key, *list, partitions);
        const auto now = Clock::now();
        std::lock_guard lock(mutex_);
        Track& track = tracks_[key];
        track.history.resize(static_cast<std::size_t>(partitions));
        track.latest.assign(static_cast<std::size_t>(partitions), -1);
        const auto keep = std::min<Clock::duration>(kMaxHistory, track.horizon + min_history_);
        for (int i = 0; i < list->cnt; ++i) {
            const auto& element = list->elems[i];
            if (element.err != RD_KAFKA_RESP_ERR_NO_ERROR || element.partition < 0 || element.partition >= partitions) {
                continue;
            }
            const auto p = static_cast<std::size_t>(element.partition);
            std::int64_t reached = element.offset;  // RD_KAFKA_OFFSET_INVALID (-1001): none committed
            if (reached >= 0) {
                track.any_commit = true;
            } else if (p < lows.size()) {
                reached = lows[p];  // never committed here: nothing below the log's start is left to read
            }
            track.latest[p] = reached;
            if (reached < 0) continue;
            auto& history = track.history[p].committed;
            if (history.empty() || history.back().second != reached) history.emplace_back(now, reached);
            while (history.size() > 1 && now - history.front().first > keep) history.pop_front();
        }
        if (caught_up) {
            track.watermarks.emplace_back(at, std::move(watermarks));
            // Only the newest covered snapshot matters among those before it.
            std::size_t newest_covered = 0;
            bool found = false;
            for (std::size_t i = track.watermarks.size(); i-- > 0;) {
                if (Covers(track.latest, track.watermarks[i].second)) {
                    newest_covered = i;
                    found = true;
                    break;
                }
            }
            if (found)
                track.watermarks.erase(track.watermarks.begin(),
                                       track.watermarks.begin() + static_cast<long>(newest_covered));
            while (track.watermarks.size() > 2400) track.watermarks.pop_front();
        }
        track.fetched_at = now;
        track.last_error.clear();
    }

    // The log-start offsets of the partitions on which the group has committed nothing, read
    // again at most every kLowsMaxAge (they only grow, by retention, so an older one only makes
    // an answer "not yet"); -1 where not known.
    const std::vector<std::int64_t>& LowWatermarks(rd_kafka_t* client,
                                                   const std::pair<std::string, std::string>& key,
                                                   const rd_kafka_topic_partition_list_t& committed,
                                                   int partitions) {
        auto& [at, lows] = lows_[key];
        const bool fresh = static_cast<int>(lows.size()) == partitions && Clock::now() - at < kLowsMaxAge;
        if (fresh) return lows;
        const std::vector<std::int64_t> known = std::move(lows);
        lows.assign(static_cast<std::size_t>(partitions), -1);
        for (int i = 0; i < committed.cnt; ++i) {
            const auto& element = committed.elems[i];
            if (element.err != RD_KAFKA_RESP_ERR_NO_ERROR || element.offset >= 0 || element.partition < 0 ||
                element.partition >= partitions) {
                continue;
            }
            const auto p = static_cast<std::size_t>(element.partition);
            std::int64_t low = 0;
            std::int64_t high = 0;
            if (rd_kafka_query_watermark_offsets(
                    client, key.second.c_str(), element.partition, &low, &high, kFetchTimeoutMs) ==
                RD_KAFKA_RESP_ERR_NO_ERROR) {
                lows[p] = low;
            } else if (p < known.size()) {
                lows[p] = known[p];
            }
        }
        at = Clock::now();
        return lows;
    }

    std::string brokers_;
    KafkaProperties properties_;
    std::chrono::milliseconds interval_;
    std::chrono::milliseconds min_history_;
    Clock::time_point started_at_{};  // set by Start, before the fetch thread exists
    std::atomic<bool> stopping_{false};
    std::thread thread_;
    std::map<std::string, detail::ClientPtr> clients_;  // by group; the fetch thread only
    std::map<std::pair<std::string, std::string>, std::pair<Clock::time_point, std::vector<std::int64_t>>>
        lows_;  // by (group, topic); the fetch thread only
    mutable std::mutex mutex_;
    std::map<std::pair<std::string, std::string>, Track> tracks_;
};

GroupProgress::GroupProgress(std::string brokers,
                             KafkaProperties properties,
                             std::chrono::milliseconds interval,
                             std::chrono::milliseconds min_history)
    : impl_(std::make_unique<Impl>(std::move(brokers), std::move(properties), interval, min_history)) {}
GroupProgress::~GroupProgress() {
    Stop();
}
void GroupProgress::Follow(const std::string& group,
                           const std::string& topic,
                           bool caught_up,
                           std::chrono::milliseconds horizon) {
    impl_->Follow(group, topic, caught_up, horizon);
}
void GroupProgress::Start() {
    impl_->Start();
}
void GroupProgress::Stop() {
    impl_->Stop();
}
GroupProgress::ReadAnswer GroupProgress::CommandRead(const std::string& group,
                                                     const std::string& topic,
                                                     std::int32_t partition,
                                                     std::int64_t offset) const {
    return impl_->CommandRead(group, topic, partition, offset);
}
std::optional<std::chrono::milliseconds> GroupProgress::CaughtUpAgo(const std::string& group,
                                                                    const std::string& topic) const {
    return impl_->CaughtUpAgo(group, topic);
}

}  // namespace sagaflow::outbox
