#include "outbox/relay.hpp"

#include <spdlog/spdlog.h>

#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <unordered_set>
#include <utility>
#include <vector>

#include "outbox/detail/claim_position.hpp"
#include "outbox/detail/rdkafka.hpp"
#include "store/errors.hpp"
#include "store/named_thread.hpp"
#include "store/pool.hpp"
#include "store/prepared.hpp"
#include "store/url.hpp"

namespace sagaflow::outbox {
namespace {

// "sfrl": the session advisory lock that makes one relay the publisher of an outbox. Its second
// key is the outbox's schema, so services that share a database on schemas of their own (the
// example participants) each have a leader.
constexpr int kRelayLock = 0x7366726c;
// "sfwk": the wake lock, second key the schema's hashtext like the leader lock's. The leader holds
// it exclusively while it may sleep; an inserting statement tries it shared and notifies only when
// that fails (014_notify_only_a_sleeping_relay.sql).
constexpr int kWakeLock = 0x7366776b;
// How long taking the wake lock waits for the transactions in flight that added rows without
// notifying; past it the relay claims again and retries.
constexpr const char* kArmTimeout = "20ms";
// Not a librdkafka code: the slot still waits for its delivery report.
constexpr auto kPending = RD_KAFKA_RESP_ERR__BEGIN;
// How long a delivered batch's mark waits, once the relay is idle, for a claim to ride with. Under
// load the next batch's rows were notified while this one was at the broker, and the mark rides with
// their claim at once; at a few sagas a second rows come every few milliseconds, and a short wait
// saves a transaction per batch. It delays `published_at` (the engine's step clocks read it; they
// count in seconds) by at most this.
constexpr std::chrono::milliseconds kMarkDelay{10};

struct Slot {
    long long id = 0;
    long long version = 0;  // the row's xmin (a 32-bit transaction id) when claimed
    std::string key;
    int attempts = 0;
    bool listed = false;  // in outbox_retry when claimed
    rd_kafka_resp_err_t err = kPending;
    bool produced = false;
    std::int32_t partition = -1;  // where the broker put it (delivery report)
    std::int64_t offset = -1;
};

// Delivered rows to mark: the parameters $1..$4 of RelayMarkStatement and RelayMarkAndClaimStatement.
struct Marks {
    std::vector<long long> ids, versions, partitions, offsets;
    void Add(const Slot& slot) {
        ids.push_back(slot.id);
        versions.push_back(slot.version);
        partitions.push_back(slot.partition);
        offsets.push_back(slot.offset);
    }
};

// Runs a prepared mark statement with `marks` as its first four parameters, then `more`.
template <typename... More>
pqxx::result ExecMarks(pqxx::transaction_base& tx, const char* statement, const Marks& marks, More&&... more) {
    return tx.exec_prepared(statement,
                            store::BigintArray(marks.ids),
                            store::BigintArray(marks.versions),
                            store::BigintArray(marks.partitions),
                            store::BigintArray(marks.offsets),
                            std::forward<More>(more)...);
}

// What the `sagaflow_outbox` notifications said since the relay last looked. The trigger sends
// "<schema>:<highest id inserted>" (006_outbox_notify_id.sql); every relay of a database listens on
// the one channel, so a relay keeps only its own schema's. A payload it cannot read (an older
// trigger) just means "look".
struct Wakeups {
    std::string schema;
    long long highest = 0;  // the highest id notified for this schema
    bool unreadable = false;
};

class NotifyReceiver final : public pqxx::notification_receiver {
  public:
    NotifyReceiver(pqxx::connection_base& conn, Wakeups& wakeups)
        : pqxx::notification_receiver(conn, "sagaflow_outbox"), wakeups_(wakeups) {}
    void operator()(const std::string& payload, int) override {
        const auto colon = payload.rfind(':');
        if (colon == std::string::npos) {
            wakeups_.unreadable = true;
            return;
        }
        if (payload.compare(0, colon, wakeups_.schema) != 0) return;  // another schema's outbox
        try {
            wakeups_.highest = std::max(wakeups_.highest, std::stoll(payload.substr(colon + 1)));
        } catch (const std::exception&) {
            wakeups_.unreadable = true;
        }
    }

  private:
    Wakeups& wakeups_;
};

}  // namespace

namespace {

// The claim's rows (see RelayClaimStatement), with the limit and the position as parameters
// `$limit` and `$from`.
std::string ClaimRows(bool after_position, int limit, int from, const std::string& also = "") {
    const std::string l = "$" + std::to_string(limit);
    const std::string f = "$" + std::to_string(from);
    // Each row also carries the claim's snapshot xmax (a suspect range's bound, see ClaimPosition),
    // the row version it read (xmin: the mark applies only to that version) and whether outbox_retry
    // lists it.
    const std::string rows =
        "SELECT id, event_id::text, topic, message_key, headers::text, payload::text, attempts, "
        "pg_snapshot_xmax(pg_current_snapshot())::text, xmin::text, "
        "EXISTS (SELECT 1 FROM outbox_retry r WHERE r.id = o.id) "
        "FROM outbox o WHERE published_at IS NULL AND (next_attempt_at IS NULL OR next_attempt_at <= now()) "
        // A row waits behind an earlier row of its key that the relay took before and that is
        // unpublished again (outbox_retry: backing off, or re-armed).
        "AND NOT EXISTS (SELECT 1 FROM outbox_retry b WHERE b.message_key = o.message_key AND b.id < o.id) " +
        also;
    if (after_position) return rows + "AND o.id > " + f + " ORDER BY id LIMIT " + l;
    // From the low-water mark through the primary key, and the listed rows below it.
    return "SELECT * FROM ((" + rows + "AND o.id >= " + f + " ORDER BY id LIMIT " + l + ") UNION ALL (" + rows +
           "AND o.id < " + f + " AND o.id IN (SELECT id FROM outbox_retry) ORDER BY id LIMIT " + l +
           ")) c ORDER BY id LIMIT " + l;
}

// The mark (RelayMarkStatement) as the CTEs `marked` and `unlisted`.
constexpr const char* kMarkCtes =
    "WITH marked AS (UPDATE outbox o SET published_at = clock_timestamp(), attempts = o.attempts + 1, "
    "kafka_partition = c.part, kafka_offset = c.off "
    "FROM unnest($1::bigint[], $2::xid[], $3::int[], $4::bigint[]) AS c(id, seen, part, off) "
    "WHERE o.id = c.id AND o.xmin = c.seen AND o.published_at IS NULL RETURNING o.id), "
    "unlisted AS (DELETE FROM outbox_retry r USING marked m WHERE r.id = m.id) ";

}  // namespace

std::string RelayClaimStatement(bool after_position) {
    return ClaimRows(after_position, 1, 2);
}

// The mark of a batch's delivered rows: $1 their ids, $2 the row versions the claim read, $3 and $4
// the partitions and offsets the broker gave them. A row changed since (re-armed by the engine while
// its publish was in flight) keeps its new state, and a later full claim publishes it again. No
// indexed column changes: a HOT update. Rows published take their entry off outbox_retry. Returns the
// ids marked.
std::string RelayMarkStatement() {
    return std::string(kMarkCtes) + "SELECT id FROM marked";
}

// The mark and the next claim after the position ($6, LIMIT $5) in one statement: under load the
// rows of the next batch committed while this one was at the broker, and fetching them here saves
// a round trip and a transaction per batch. The statement's snapshot still shows this batch's rows
// unpublished: they are left out by id.
std::string RelayMarkAndClaimStatement() {
    return std::string(kMarkCtes) + ClaimRows(true, 5, 6, "AND NOT (o.id = ANY($1::bigint[])) ");
}

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
    properties.try_emplace("linger.ms", "0");
    // Back on a broker within a second of its return (librdkafka's default backs off up to 10 s).
    properties.try_emplace("reconnect.backoff.max.ms", "1000");
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
                if (const auto unlogged = failures_.Due()) {
                    spdlog::warn("relay: {}; reconnecting every second{}",
                                 store::ScrubPassword(store::ExplainDatabaseError(e), options_.db_url),
                                 *unlogged == 0 ? "" : fmt::format(" ({} failures since the last line)", *unlogged));
                }
                detail::SleepUnless(stopping_, std::chrono::milliseconds(1000));
            }
        }
        producer_.reset();
    }

  private:
    // One database session: lock, listen, publish until stopped or the connection breaks.
    void Session() {
        auto conn = store::ConnectOnce(options_.db_url);
        // Every statement of the relay is an index lookup: planned once per connection, not
        // cached while the outbox was small (a plan chosen on an empty table keeps its sequential
        // scans as the table grows) and not re-planned per call for its array parameters
        // (store::UseOwnStatementPlans).
        store::UseOwnStatementPlans(*conn);
        // The relay's commits do not wait for the WAL flush. All they write is bookkeeping: marks
        // (published_at, partition, offset), failure marks, the low-water mark, taking rows off
        // outbox_retry. A crash can lose the last of them — then those rows are published again
        // under the same event ids, as after a crash between the broker's ack and the mark, and the
        // inboxes drop the duplicates — and nothing else: PostgreSQL loses only the tail of the WAL,
        // and every durable commit flushes all WAL before its own, so a transaction that read a mark
        // (a timer that found a command reached) never outlives it. The outbox rows themselves and
        // every state change are written by the engine's and participants' sessions, durably. What it
        // saves: a mark rides with the next claim, and the claim no longer waits for a disk flush
        // before it returns its rows (bench/README.md).
        pqxx::nontransaction{*conn}.exec("SET synchronous_commit = off");
        conn->prepare("claim_full", RelayClaimStatement(false));
        conn->prepare("claim_after", RelayClaimStatement(true));
        // Whether the transactions that could commit into the suspect range have all ended, and a
        // row of it still waits that does not hold back its key by itself (one snapshot for both).
        conn->prepare("suspect_open",
                      "SELECT pg_snapshot_xmin(pg_current_snapshot()) < $3::text::xid8 OR EXISTS (SELECT 1 FROM "
                      "outbox WHERE id BETWEEN $1 AND $2 AND published_at IS NULL AND next_attempt_at IS NULL "
                      "AND attempts = 0)");
        conn->prepare("mark", RelayMarkStatement());
        conn->prepare("mark_claim", RelayMarkAndClaimStatement());
        conn->prepare("record_low_water", "UPDATE outbox_relay SET low_water = $1 WHERE only_row AND low_water < $1");
        conn->prepare("fail",
                      "UPDATE outbox SET attempts = attempts + 1, last_error = $2, "
                      "next_attempt_at = now() + make_interval(secs => $3::double precision) "
                      "WHERE id = $1 AND xmin = $4::xid AND published_at IS NULL");
        Wakeups wakeups;
        wakeups.schema = pqxx::nontransaction{*conn}.exec1("SELECT current_schema()")[0].as<std::string>();
        // The leader listens and holds the wake lock (`armed`) only while it may sleep (a listening
        // session is signalled at every notification of its database, whatever the channel): a
        // busy relay claims again after every batch, and commits meanwhile notify nobody.
        std::optional<NotifyReceiver> listener;
        bool armed = false;
        std::chrono::steady_clock::time_point last_full_claim{};
        while (!stopping_.load()) {
            if (!leader_.load()) {
                // With the lock, the low-water mark the previous leader recorded last (one it wrote
                // after this statement's snapshot is higher: a lower mark is always safe).
                const auto row = pqxx::nontransaction{*conn}.exec1(
                    "SELECT pg_try_advisory_lock(" + std::to_string(kRelayLock) +
                    ", hashtext(current_schema())), (SELECT low_water FROM outbox_relay WHERE only_row)");
                leader_ = row[0].as<bool>();
                if (!leader_.load()) {
                    detail::SleepUnless(stopping_, options_.poll_interval);
                    continue;
                }
                position_ = detail::ClaimPosition{row[1].as<long long>()};
                listener.emplace(*conn, wakeups);  // dispatches what arrives; listening is Arm's
                pqxx::nontransaction{*conn}.exec("UNLISTEN sagaflow_outbox");
                token_locked_ = false;
                unmarked_ = {};
                recorded_low_ = position_.floor;
                spdlog::info("relay: publishing (leader lock taken)");
            }
            EnsureProducer();
            // Rows notified or poked before a claim committed before it, so the claim sees them.
            long long covered = wakeups.highest;
            wakeups.unreadable = false;
            if (local_) local_->Take();
            // A full claim (from the low-water mark, and the listed rows) every poll interval finds what a
            // claim after the position cannot see: re-armed rows and rows whose backoff ended. While
            // a suspect range exists every claim is a full one. In between, claims start after it.
            const auto now = std::chrono::steady_clock::now();
            const bool full =
                position_.suspect || !position_.started || now - last_full_claim >= options_.poll_interval;
            if (full) last_full_claim = now;
            const int published = PublishBatch(*conn, full, wakeups, covered);
            if (published < 0) {  // left unmarked: a new producer, and the same rows again
                detail::SleepUnless(stopping_, options_.initial_backoff);
                continue;
            }
            if (full && position_.suspect && published < options_.batch_size) ClearSuspect(*conn);
            RecordLowWater(*conn, false);
            if (published >= options_.batch_size) continue;  // more may be waiting
            if (!armed) {
                // Unannounced rows may have committed while the batch was at the broker: claim
                // again (the batch's mark rides with it). Once a claim finds nothing, take the wake
                // lock, then claim once more before sleeping: a commit after that one notifies.
                if (published > 0) continue;
                armed = Arm(*conn);
                continue;
            }
            if (published > 0) conn->get_notifs();  // those that came while the batch was at the broker
            if (published > 0 && (wakeups.highest > covered || wakeups.unreadable || Poked())) {
                // Rows were announced while this batch was at the broker: claim again. When only
                // this process's own writers announced them (a poke; they never notify a relay
                // that holds its token's lock), the relay stays armed: it sleeps again as soon as a
                // claim finds nothing, without the two round trips of disarming and arming.
                if (token_locked_ && wakeups.highest <= covered && !wakeups.unreadable) continue;
                // Busy with other writers' rows: stop the notifications (each one signals every
                // listening session of the database) and claim batch after batch until a claim
                // finds nothing.
                Disarm(*conn);
                armed = false;
                continue;
            }
            // Idle: wait for a NOTIFY of a row this claim did not see, in slices so Stop() is seen
            // quickly. The batch's mark waits for it too (it rides with the next claim), but not
            // longer than kMarkDelay: the first slice ends then (in 2 ms slices it woke the relay
            // up to five times for nothing).
            const auto start = std::chrono::steady_clock::now();
            const auto deadline = start + options_.poll_interval;
            while (wakeups.highest <= covered && !wakeups.unreadable && !Poked() && !stopping_.load() &&
                   std::chrono::steady_clock::now() < deadline) {
                const auto waited = std::chrono::steady_clock::now() - start;
                if (!unmarked_.ids.empty() && waited >= kMarkDelay) FlushMarks(*conn);
                const auto mark_due = std::chrono::ceil<std::chrono::milliseconds>(kMarkDelay - waited).count();
                Await(*conn, unmarked_.ids.empty() ? 50 : static_cast<int>(std::max<long long>(mark_due, 1)));
                rd_kafka_poll(producer_.get(), 0);
            }
        }
        if (leader_.load()) {
            FlushMarks(*conn);
            RecordLowWater(*conn, true);
        }
        pqxx::nontransaction tx{*conn};
        tx.exec("SELECT pg_advisory_unlock_all()");
        leader_ = false;
    }

    bool Poked() const noexcept { return local_ && local_->Pending(); }

    // Waits up to `ms` for a notification (dispatched to the listener) or a LocalWake poke.
    // (pqxx's await_notification, with the poke's descriptor beside the socket.)
    void Await(pqxx::connection& conn, int ms) {
        if (conn.get_notifs() > 0) return;  // already read with an earlier result
        std::array<pollfd, 2> fds{pollfd{conn.sock(), POLLIN, 0}, pollfd{local_ ? local_->Fd() : -1, POLLIN, 0}};
        if (poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR) {
            throw std::runtime_error(std::string("relay: poll: ") + std::strerror(errno));
        }
        if ((fds[1].revents & POLLIN) != 0) local_->Drain();  // Pending() says what it meant
        if ((fds[0].revents & (POLLIN | POLLERR | POLLHUP)) != 0) conn.get_notifs();
    }

    // Takes the wake lock, waiting at most kArmTimeout for the transactions in flight that added rows
    // unannounced (they hold it shared), and listens. False when they did not end in time.
    //
    // The first time in a session it also tries the LocalWake token's lock (token, schema), kept
    // until the session ends: while this relay sleeps, its own process's writers find it held and
    // leave the wake to LocalWake::Poke (016_wake_own_relay_without_notify.sql). Only tried, never
    // waited for: a writer holding it shared (it found another relay asleep) may stay in its
    // transaction for long, and until the lock is held the process's commits just notify.
    bool Arm(pqxx::connection& conn) {
        try {
            // One transaction: the LISTEN takes effect when it commits, before the next claim's
            // snapshot; a commit that notified before that is seen by the claim.
            const bool try_token = local_ != nullptr && !token_locked_;
            const auto result = pqxx::nontransaction{conn}.exec(
                std::string("SELECT set_config('lock_timeout', '") + kArmTimeout +
                "', true); LISTEN sagaflow_outbox; SELECT pg_advisory_lock(" + std::to_string(kWakeLock) +
                ", hashtext(current_schema()))" +
                (try_token ? "; SELECT pg_try_advisory_lock(" + std::to_string(local_->Token()) +
                                 ", hashtext(current_schema()))"
                           : std::string()));
            if (try_token) token_locked_ = result[0][0].as<bool>();
            return true;
        } catch (const pqxx::sql_error& e) {
            if (e.sqlstate() == "55P03") return false;  // lock_not_available: claim again, then retry
            throw;
        }
    }

    void Disarm(pqxx::connection& conn) {
        pqxx::nontransaction{conn}.exec("SELECT pg_advisory_unlock(" + std::to_string(kWakeLock) +
                                        ", hashtext(current_schema())); UNLISTEN sagaflow_outbox");
    }

    void EnsureProducer() {
        if (producer_) return;
        auto conf = detail::MakeProducerConf(RelayProducerProperties(options_));
        rd_kafka_conf_set_opaque(conf.get(), this);
        rd_kafka_conf_set_dr_msg_cb(conf.get(), [](rd_kafka_t*, const rd_kafka_message_t* message, void* opaque) {
            auto* slot = static_cast<Slot*>(message->_private);
            slot->err = message->err;
            slot->partition = message->partition;
            slot->offset = message->offset;
            --static_cast<Impl*>(opaque)->pending_;
        });
        producer_ = detail::MakeClient(RD_KAFKA_PRODUCER, std::move(conf));
    }

    // Claims rows with ids above the position, or (`full`) from the low-water mark and the rows listed
    // in outbox_retry; a row waits behind an earlier listed row of its key (backing off or re-armed). Returns the
    // number of rows claimed (published or scheduled again), or -1 when the batch was left unmarked (fatal producer
    // error, stalled deliveries, or stopping with deliveries unacknowledged).
    //
    // No transaction stays open while the broker acknowledges: the claim and the mark are one
    // statement each, and the mark applies to the row versions the claim read. The leader lock
    // already makes this relay the only one publishing its schema's outbox; row locks held across
    // the broker round trip added a lock record per row to the WAL, two round trips per batch, and
    // an open transaction (holding back vacuum) for as long as a broker outage lasted.
    //
    // The previous batch's mark, if it still waits, rides with a claim after the position (one
    // statement: RelayMarkAndClaimStatement); a full claim comes after it. `covered` is set to the
    // highest notified id that claim saw.
    int PublishBatch(pqxx::connection& conn, bool full, const Wakeups& wakeups, long long& covered) {
        pqxx::result rows;
        if (full) FlushMarks(conn);
        {
            pqxx::nontransaction tx{conn};
            if (!unmarked_.ids.empty()) {
                covered = wakeups.highest;
                rows = ExecMarks(tx, "mark_claim", unmarked_, options_.batch_size, position_.position);
                metrics_.published += unmarked_.ids.size();
                unmarked_ = {};
            } else {
                rows = tx.exec_prepared(full ? "claim_full" : "claim_after",
                                        options_.batch_size,
                                        full ? position_.Low() : position_.position);
            }
        }
        if (rows.empty()) return 0;
        std::vector<Slot> slots(rows.size());
        Produce(rows, slots);
        if (!Delivered()) return -1;
        position_.Claimed(Claimed(slots),
                          std::stoull(rows[0][7].as<std::string>()),
                          std::chrono::steady_clock::now(),
                          options_.poll_interval);
        metrics_.published += Mark(conn, slots);
        return static_cast<int>(rows.size());
    }

    // Hands each claimed row to the producer, in order; a row behind a failed row of its key is
    // skipped (its slot stays kPending: not claimed, it holds the position).
    void Produce(const pqxx::result& rows, std::vector<Slot>& slots) {
        std::unordered_set<std::string> blocked_keys;
        pending_ = 0;
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const auto& row = rows[static_cast<pqxx::result::size_type>(i)];
            Slot& slot = slots[i];
            slot.id = row[0].as<long long>();
            slot.version = row[8].as<long long>();
            slot.key = row[3].as<std::string>();
            slot.attempts = row[6].as<int>();
            slot.listed = row[9].as<bool>();
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
                break;  // the producer is unusable: Delivered() handles it, not the row's fault
            } else {
                slot.err = err;
                blocked_keys.insert(slot.key);
            }
        }
    }

    // Waits for every delivery report: librdkafka retries internally (same bytes, same producer
    // sequence), so this only gives up on a fatal error, stalled deliveries, or when stopping —
    // then the producer is replaced, its rows stay unpublished, and it returns false.
    bool Delivered() {
        std::chrono::steady_clock::time_point stop_deadline{};
        std::string fatal;
        auto last_progress = std::chrono::steady_clock::now();
        int last_pending = pending_;
        bool stalled = false;
        while (pending_ > 0) {
            rd_kafka_poll(producer_.get(), 50);
            if (fatal = detail::FatalError(producer_.get()); !fatal.empty()) break;
            const auto now = std::chrono::steady_clock::now();
            if (pending_ < last_pending) {
                last_pending = pending_;
                last_progress = now;
            } else if (now - last_progress >= options_.stall_timeout) {
                stalled = true;
                break;
            }
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
        if (fatal.empty()) fatal = detail::FatalError(producer_.get());
        if (pending_ == 0 && fatal.empty()) return true;
        ++metrics_.failed_batches;
        if (!fatal.empty()) {
            spdlog::error("relay: fatal producer error: {}; replacing the producer and publishing the batch again",
                          fatal);
            ++metrics_.producer_restarts;
        } else if (stalled) {
            spdlog::warn(
                "relay: no delivery report for {} ms with {} deliveries outstanding; replacing the producer and "
                "publishing the batch again with the same event ids",
                options_.stall_timeout.count(),
                pending_);
            ++metrics_.producer_restarts;
        } else {
            spdlog::warn(
                "relay: {} deliveries unacknowledged after the drain timeout; they will be published again with the "
                "same event ids",
                pending_);
        }
        // Destroying the producer purges what it still holds.
        rd_kafka_purge(producer_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(producer_.get(), 0);
        producer_.reset();
        return false;
    }

    // The ids of the rows the batch took (delivered or failed; not those skipped behind a failure).
    static std::vector<long long> Claimed(const std::vector<Slot>& slots) {
        std::vector<long long> claimed;
        for (const auto& slot : slots) {
            if (slot.err != kPending) claimed.push_back(slot.id);
        }
        return claimed;
    }

    // Marks the delivered rows published (at the versions claimed) and schedules the failed ones
    // again. Delivered rows alone are left in unmarked_: their mark rides with the next claim (or
    // goes alone after kMarkDelay, before a full claim and when the session ends). Not when the
    // batch held a listed row: the claim's snapshot would still list it and hold back the later
    // rows of its key; nor with failed rows: one transaction for all. Returns how many rows were
    // marked now.
    std::size_t Mark(pqxx::connection& conn, const std::vector<Slot>& slots) {
        Marks delivered;
        std::vector<const Slot*> failed;
        for (const auto& slot : slots) {
            if (slot.err == kPending) continue;
            if (slot.err == RD_KAFKA_RESP_ERR_NO_ERROR) {
                delivered.Add(slot);
            } else {
                failed.push_back(&slot);
            }
        }
        const auto mark = [&](pqxx::transaction_base& tx) {
            return delivered.ids.empty() ? 0 : ExecMarks(tx, "mark", delivered).size();
        };
        if (failed.empty()) {
            const bool listed = std::any_of(slots.begin(), slots.end(), [](const Slot& slot) { return slot.listed; });
            if (!listed && !delivered.ids.empty()) {
                unmarked_ = std::move(delivered);
                return 0;
            }
            pqxx::nontransaction tx{conn};
            return mark(tx);
        }
        std::vector<double> backoffs;
        pqxx::work tx{conn};
        for (const Slot* slot : failed) {
            backoffs.push_back(std::min(static_cast<double>(options_.max_backoff.count()),
                                        static_cast<double>(options_.initial_backoff.count()) *
                                            std::pow(2.0, std::min(slot->attempts, 20))) /
                               1000.0);
            tx.exec_prepared("fail", slot->id, detail::ErrorText(slot->err), backoffs.back(), slot->version);
        }
        const std::size_t marked = mark(tx);
        tx.commit();
        // Counted and logged once the schedule is committed.
        for (std::size_t i = 0; i < failed.size(); ++i) {
            ++metrics_.retried;
            spdlog::warn("relay: outbox row {} not published ({}); next attempt in {:.1f} s",
                         failed[i]->id,
                         detail::ErrorText(failed[i]->err),
                         backoffs[i]);
        }
        return marked;
    }

    // Marks the delivered rows whose mark still waits, alone.
    void FlushMarks(pqxx::connection& conn) {
        if (unmarked_.ids.empty()) return;
        pqxx::nontransaction tx{conn};
        metrics_.published += ExecMarks(tx, "mark", unmarked_).size();
        unmarked_ = {};
    }

    // Records the low-water mark (at most once a second, and when the session ends): a lower value
    // than the truth is always safe, it only makes the next session's first claims start earlier.
    void RecordLowWater(pqxx::connection& conn, bool now) {
        // Rows delivered but not marked yet are not covered.
        const long long low =
            unmarked_.ids.empty()
                ? position_.Low()
                : std::min(position_.Low(), *std::min_element(unmarked_.ids.begin(), unmarked_.ids.end()));
        const auto at = std::chrono::steady_clock::now();
        if (low <= recorded_low_ || (!now && at - low_recorded_at_ < std::chrono::seconds(1))) return;
        pqxx::nontransaction{conn}.exec_prepared("record_low_water", low);
        recorded_low_ = low;
        low_recorded_at_ = at;
    }

    // Clears the suspect range after a full claim that took everything it could (see ClaimPosition).
    void ClearSuspect(pqxx::connection& conn) {
        const auto& range = *position_.suspect;
        pqxx::nontransaction tx{conn};
        if (!tx.exec_prepared1("suspect_open", range.lo, range.hi, std::to_string(range.xmax))[0].as<bool>()) {
            position_.suspect.reset();
        }
    }

    const RelayOptions& options_;
    LocalWake* const local_ = options_.local_wake.get();
    bool token_locked_ = false;  // this session holds the LocalWake token's lock (Arm)
    RelayMetrics& metrics_;
    std::atomic<bool>& stopping_;
    std::atomic<bool>& leader_;
    store::FailureLogLimit failures_;  // the session's failures while the database is away
    detail::ClientPtr producer_;
    detail::ClaimPosition position_;
    Marks unmarked_;              // delivered, their mark waiting to ride with the next claim
    long long recorded_low_ = 0;  // the low-water mark as outbox_relay has it
    std::chrono::steady_clock::time_point low_recorded_at_{};
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
    thread_ = store::NamedThread("sf-relay", [this] { impl_->Run(); });
}

void Relay::Stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
}

}  // namespace sagaflow::outbox
