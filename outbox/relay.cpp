#include "outbox/relay.hpp"

#include <spdlog/spdlog.h>

#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>
#include <unordered_set>
#include <vector>

#include "outbox/detail/rdkafka.hpp"
#include "store/pool.hpp"
#include "store/url.hpp"

namespace sagaflow::outbox {
namespace {

// "sfrl": the session advisory lock that makes one relay the publisher of an outbox. Its second
// key is the outbox's schema, so services that share a database on schemas of their own (the
// example participants) each have a leader.
constexpr int kRelayLock = 0x7366726c;
// Not a librdkafka code: the slot still waits for its delivery report.
constexpr auto kPending = RD_KAFKA_RESP_ERR__BEGIN;

struct Slot {
    long long id = 0;
    std::string key;
    int attempts = 0;
    rd_kafka_resp_err_t err = kPending;
    bool produced = false;
};

class NotifyFlag final : public pqxx::notification_receiver {
  public:
    NotifyFlag(pqxx::connection_base& conn, bool& flag)
        : pqxx::notification_receiver(conn, "sagaflow_outbox"), flag_(flag) {}
    void operator()(const std::string&, int) override { flag_ = true; }

  private:
    bool& flag_;
};

}  // namespace

// The producer's properties: the user's, with idempotence and acks=all enforced.
KafkaProperties RelayProducerProperties(const RelayOptions& options) {
    KafkaProperties properties = options.properties;
    properties["bootstrap.servers"] = options.brokers;
    for (const auto& [key, required] : {std::pair{"enable.idempotence", "true"}, std::pair{"acks", "all"}}) {
        const auto it = properties.find(key);
        if (it != properties.end() && it->second != required && !(std::string(key) == "acks" && it->second == "-1")) {
            throw KafkaError(std::string("the relay needs ") + key + "=" + required +
                             " (rule R-DIST-IDEM-X2: a retry must never become a second message). Hint: remove it "
                             "from kafka.properties");
        }
        properties[key] = required;
    }
    properties.try_emplace("linger.ms", "5");
    // librdkafka retries a message until the broker takes it: the relay bounds its own wait only
    // when stopping, so a broker outage pauses publishing and loses nothing.
    properties.try_emplace("message.timeout.ms", "0");
    return properties;
}

class Relay::Impl {
  public:
    Impl(const RelayOptions& options, RelayMetrics& metrics, std::atomic<bool>& stopping, std::atomic<bool>& leader)
        : options_(options), metrics_(metrics), stopping_(stopping), leader_(leader) {}

    void Run() {
        while (!stopping_.load()) {
            try {
                Session();
            } catch (const std::exception& e) {
                leader_ = false;
                spdlog::warn("relay: {}; reconnecting", store::ScrubPassword(e.what(), options_.db_url));
                SleepUnlessStopping(std::chrono::milliseconds(1000));
            }
        }
        producer_.reset();
    }

  private:
    // One database session: lock, listen, publish until stopped or the connection breaks.
    void Session() {
        auto conn = store::ConnectOnce(options_.db_url);
        conn->prepare("claim",
                      "SELECT id, event_id::text, topic, message_key, headers::text, payload::text, attempts "
                      "FROM outbox o WHERE published_at IS NULL "
                      "AND (next_attempt_at IS NULL OR next_attempt_at <= now()) "
                      "AND NOT EXISTS (SELECT 1 FROM outbox b WHERE b.published_at IS NULL "
                      "AND b.next_attempt_at IS NOT NULL AND b.message_key = o.message_key AND b.id < o.id) "
                      "ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED");
        conn->prepare(
            "mark",
            "UPDATE outbox SET published_at = clock_timestamp(), attempts = attempts + 1 WHERE id = ANY($1::bigint[])");
        conn->prepare("fail",
                      "UPDATE outbox SET attempts = attempts + 1, last_error = $2, "
                      "next_attempt_at = now() + make_interval(secs => $3::double precision) WHERE id = $1");
        bool notified = false;
        NotifyFlag listener{*conn, notified};
        while (!stopping_.load()) {
            if (!leader_.load()) {
                pqxx::nontransaction tx{*conn};
                leader_ = tx.exec1("SELECT pg_try_advisory_lock(" + std::to_string(kRelayLock) +
                                   ", hashtext(current_schema()))")[0]
                              .as<bool>();
                if (!leader_.load()) {
                    SleepUnlessStopping(options_.poll_interval);
                    continue;
                }
                spdlog::info("relay: publishing (leader lock taken)");
            }
            EnsureProducer();
            notified = false;
            const int published = PublishBatch(*conn);
            if (published < 0) {  // rolled back: a new producer, and the same rows again
                SleepUnlessStopping(options_.initial_backoff);
                continue;
            }
            if (published >= options_.batch_size) continue;  // more may be waiting
            // Idle: wait for a NOTIFY, in slices so Stop() is seen quickly.
            const auto deadline = std::chrono::steady_clock::now() + options_.poll_interval;
            while (!notified && !stopping_.load() && std::chrono::steady_clock::now() < deadline) {
                conn->await_notification(0, 50'000);
                rd_kafka_poll(producer_.get(), 0);
            }
        }
        pqxx::nontransaction tx{*conn};
        tx.exec("SELECT pg_advisory_unlock_all()");
        leader_ = false;
    }

    void EnsureProducer() {
        if (producer_) return;
        auto conf = detail::MakeConf(RelayProducerProperties(options_));
        rd_kafka_conf_set_opaque(conf.get(), this);
        rd_kafka_conf_set_dr_msg_cb(conf.get(), [](rd_kafka_t*, const rd_kafka_message_t* message, void* opaque) {
            auto* slot = static_cast<Slot*>(message->_private);
            slot->err = message->err;
            --static_cast<Impl*>(opaque)->pending_;
        });
        producer_ = detail::MakeClient(RD_KAFKA_PRODUCER, std::move(conf));
    }

    std::string FatalError() {
        std::array<char, 512> reason{};
        if (rd_kafka_fatal_error(producer_.get(), reason.data(), reason.size()) == RD_KAFKA_RESP_ERR_NO_ERROR)
            return {};
        return reason.data();
    }

    // Returns the number of rows claimed (published or scheduled again), or -1 when the batch was
    // rolled back (fatal producer error, or stopping with deliveries unacknowledged).
    int PublishBatch(pqxx::connection& conn) {
        pqxx::work tx{conn};
        const auto rows = tx.exec_prepared("claim", options_.batch_size);
        if (rows.empty()) {
            tx.commit();
            return 0;
        }
        std::vector<Slot> slots(rows.size());
        std::unordered_set<std::string> blocked_keys;
        pending_ = 0;
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const auto& row = rows[static_cast<pqxx::result::size_type>(i)];
            Slot& slot = slots[i];
            slot.id = row[0].as<long long>();
            slot.key = row[3].as<std::string>();
            slot.attempts = row[6].as<int>();
            if (blocked_keys.count(slot.key) != 0) continue;  // an earlier row of this key failed
            detail::HeadersPtr headers{rd_kafka_headers_new(4)};
            const auto header_json = nlohmann::json::parse(row[4].as<std::string>(), nullptr, false);
            if (header_json.is_object()) {
                for (const auto& [name, value] : header_json.items()) {
                    const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
                    rd_kafka_header_add(headers.get(),
                                        name.c_str(),
                                        static_cast<ssize_t>(name.size()),
                                        text.data(),
                                        static_cast<ssize_t>(text.size()));
                }
            }
            rd_kafka_header_add(headers.get(), "sagaflow-event-id", -1, row[1].c_str(), -1);
            const std::string topic = row[2].as<std::string>();
            const std::string payload = row[5].as<std::string>();
            rd_kafka_resp_err_t err;
            while ((err = detail::Produce(producer_.get(), topic, slot.key, payload, headers.get(), &slot)) ==
                   RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                rd_kafka_poll(producer_.get(), 10);
            }
            if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
                static_cast<void>(headers.release());  // owned by librdkafka now
                slot.produced = true;
                ++pending_;
            } else if (err == RD_KAFKA_RESP_ERR__FATAL) {
                break;  // the producer is unusable: handled below, not the row's fault
            } else {
                slot.err = err;
                blocked_keys.insert(slot.key);
            }
        }
        // Wait for every delivery report: librdkafka retries internally (same bytes, same
        // producer sequence), so this only returns early on a fatal error or when stopping.
        std::chrono::steady_clock::time_point stop_deadline{};
        std::string fatal;
        while (pending_ > 0) {
            rd_kafka_poll(producer_.get(), 50);
            if (fatal = FatalError(); !fatal.empty()) break;
            if (stopping_.load()) {
                if (stop_deadline == std::chrono::steady_clock::time_point{}) {
                    stop_deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
                } else if (std::chrono::steady_clock::now() > stop_deadline) {
                    break;
                }
            }
        }
        // A fatal error may also arrive as the error of every delivery report: then it is the
        // producer's failure, not the rows', and nothing may be marked failed.
        if (fatal.empty()) fatal = FatalError();
        if (pending_ > 0 || !fatal.empty()) {
            tx.abort();
            ++metrics_.failed_batches;
            if (!fatal.empty()) {
                spdlog::error("relay: fatal producer error: {}; replacing the producer and publishing the batch again",
                              fatal);
                ++metrics_.producer_restarts;
            } else {
                spdlog::warn(
                    "relay: {} deliveries unacknowledged after the drain timeout; they will be published "
                    "again with the same event ids",
                    pending_);
            }
            // Destroying the producer purges what it still holds; the rows stay unpublished.
            rd_kafka_purge(producer_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
            rd_kafka_poll(producer_.get(), 0);
            producer_.reset();
            return -1;
        }
        std::string delivered = "{";
        for (const auto& slot : slots) {
            if (slot.err == RD_KAFKA_RESP_ERR_NO_ERROR) {
                delivered += (delivered.size() > 1 ? "," : "") + std::to_string(slot.id);
            } else if (slot.err != kPending) {
                const double backoff = std::min(
                    static_cast<double>(options_.max_backoff.count()),
                    static_cast<double>(options_.initial_backoff.count()) * std::pow(2.0, std::min(slot.attempts, 20)));
                tx.exec_prepared("fail", slot.id, detail::ErrorText(slot.err), backoff / 1000.0);
                ++metrics_.retried;
                spdlog::warn("relay: outbox row {} not published ({}); next attempt in {:.1f} s",
                             slot.id,
                             detail::ErrorText(slot.err),
                             backoff / 1000.0);
            }
        }
        delivered += "}";
        const auto marked = tx.exec_prepared("mark", delivered).affected_rows();
        tx.commit();
        metrics_.published += marked;
        return static_cast<int>(rows.size());
    }

    void SleepUnlessStopping(std::chrono::milliseconds duration) {
        const auto deadline = std::chrono::steady_clock::now() + duration;
        while (!stopping_.load() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }

    const RelayOptions& options_;
    RelayMetrics& metrics_;
    std::atomic<bool>& stopping_;
    std::atomic<bool>& leader_;
    detail::ClientPtr producer_;
    int pending_ = 0;  // touched only on the relay thread (delivery reports run inside rd_kafka_poll)
};

Relay::Relay(RelayOptions options) : options_(std::move(options)) {
    detail::MakeConf(RelayProducerProperties(options_));  // a configuration error stops startup here
    impl_ = std::make_unique<Impl>(options_, metrics_, stopping_, leader_);
}

Relay::~Relay() {
    Stop();
}

void Relay::Start() {
    if (thread_.joinable()) return;
    stopping_ = false;
    thread_ = std::thread([this] { impl_->Run(); });
}

void Relay::Stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
}

}  // namespace sagaflow::outbox
