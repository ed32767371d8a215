#include "outbox/consumer.hpp"

#include <spdlog/spdlog.h>

#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <tuple>
#include <utility>

#include "core/text_scan.hpp"
#include "outbox/detail/rdkafka.hpp"
#include "outbox/membership.hpp"
#include "store/errors.hpp"
#include "store/inbox.hpp"
#include "store/named_thread.hpp"
#include "store/pool.hpp"
#include "store/prepared.hpp"
#include "store/test_guards.hpp"
#include "store/transaction.hpp"

namespace sagaflow::outbox {
namespace {

// The headers a record's CloudEvent may be read from: content-type and the binary mode's ce_*.
RecordHeaders HeadersOf(const rd_kafka_message_t* message) {
    RecordHeaders out;
    for (auto& [name, value] : detail::MessageHeaders(message)) {
        if (name == "content-type" || name.rfind("ce_", 0) == 0) out[name] = std::move(value);
    }
    return out;
}

struct Record {
    detail::MessagePtr message;
    std::optional<InboundEvent> inbound;  // set when well-formed
    std::string reason;                   // why not, for the DLQ
};

std::string TopicOf(const rd_kafka_message_t* message) {
    return rd_kafka_topic_name(message->rkt);
}

}  // namespace

class Consumer::Impl {
  public:
    Impl(store::ConnectionPool& pool,
         ConsumerOptions options,
         BatchHandler handler,
         ConsumerMetrics& metrics,
         std::atomic<bool>& stopping)
        : own_(pool, "consumer " + options.group_id),
          options_(std::move(options)),
          handler_(std::move(handler)),
          metrics_(metrics),
          stopping_(stopping) {
        consumer_properties_ = options_.properties;
        consumer_properties_["bootstrap.servers"] = options_.brokers;
        consumer_properties_["group.id"] = options_.group_id;
        ApplyGroupDefaults(consumer_properties_);
        if (options_.static_membership && consumer_properties_.count("group.instance.id") == 0) {
            slot_ = InstanceSlot::Claim(options_.group_id);
            consumer_properties_["group.instance.id"] = slot_->Id();
        }
        if (const auto it = consumer_properties_.find("group.instance.id"); it != consumer_properties_.end()) {
            spdlog::info("consumer {}: static member {}", options_.group_id, it->second);
        }
        // Offsets only after the database commit: the consumer stores a batch's offsets once its
        // transaction committed (enable.auto.offset.store=false), and librdkafka commits the stored
        // offsets every auto.commit.interval.ms, before a partition is revoked and on close. A
        // commit per batch was an OffsetCommit request (a write to __consumer_offsets) for every
        // few records; a crash now re-delivers at most an interval's records, which the inbox drops.
        consumer_properties_["enable.auto.commit"] = "true";
        consumer_properties_["enable.auto.offset.store"] = "false";
        consumer_properties_.try_emplace("auto.commit.interval.ms", "1000");
        consumer_properties_.try_emplace("auto.offset.reset", "earliest");
        consumer_properties_.try_emplace("statistics.interval.ms", "1000");
        consumer_ = MakeConsumer();  // a configuration error stops the constructor here

        dead_letter_properties_ = WithoutConsumerProperties(options_.properties);
        dead_letter_properties_["bootstrap.servers"] = options_.brokers;
        dead_letter_properties_["enable.idempotence"] = "true";
        dead_letter_properties_["acks"] = "all";
        dlq_ = MakeDeadLetterProducer();
    }

    void Run() {
        std::chrono::milliseconds backoff = kFirstRestartDelay;
        auto last_restart = std::chrono::steady_clock::time_point{};
        bool subscribed = Subscribe();
        while (!stopping_.load()) {
            if (subscribed) {
                auto batch = PollBatch();
                if (fatal_.empty()) {
                    if (batch.empty()) continue;
                    try {
                        Process(batch);
                        StoreOffsets(batch);
                        EndStall();
                    } catch (const std::exception& e) {
                        // Nothing of this batch is committed to Kafka: rewind and read it again. A
                        // client that cannot rewind would go on after the batch, and the offsets
                        // of the next ones would commit past it: it is replaced instead, and the
                        // new one reads from the committed offsets, which this batch never moved.
                        if (const auto failure = Rewind(batch); !failure.empty()) {
                            fatal_ = "cannot seek back to a batch that failed (" + failure +
                                     "; the batch failed: " + e.what() + ")";
                        } else if (store::IsTransientDatabaseError(e)) {
                            Stall(e);
                        } else {
                            spdlog::warn(
                                "consumer {}: batch failed ({}); it will be read again", options_.group_id, e.what());
                            std::this_thread::sleep_for(std::chrono::milliseconds(500));
                        }
                    }
                    if (fatal_.empty()) continue;
                }
            }
            // The client is unusable (a fatal error, e.g. a static member fenced by its own
            // abandoned JoinGroup after a coordinator stall; no subscription; a failed rewind):
            // librdkafka never consumes with it again, or it would skip records, so replace it. What it had polled is
            // not applied; the new client reads it again from the committed offsets, and the inbox drops what was
            // applied. Fatal errors in a row back off (a second process with the same group.instance.id would fence
            // this one each time: that is a deployment error, logged as such).
            const auto now = std::chrono::steady_clock::now();
            backoff = now - last_restart < std::chrono::minutes(1) ? std::min(backoff * 2, kMaxRestartDelay)
                                                                   : kFirstRestartDelay;
            spdlog::error(
                "consumer {}: {}; replacing the Kafka consumer in {} ms (if this repeats, check that no other process "
                "uses the same group.instance.id)",
                options_.group_id,
                fatal_.empty() ? "not subscribed" : "fatal error: " + fatal_,
                backoff.count());
            detail::SleepUnless(stopping_, backoff);
            if (stopping_.load()) break;
            Close();
            consumer_.reset();
            metrics_.assigned = 0;
            consumer_ = MakeConsumer();
            assigned_once_ = false;
            fatal_.clear();
            last_restart = std::chrono::steady_clock::now();
            ++metrics_.restarts;
            subscribed = Subscribe();
        }
        Close();
        rd_kafka_flush(dlq_.get(), 5000);
    }

  private:
    static constexpr std::chrono::milliseconds kFirstRestartDelay{1000};
    static constexpr std::chrono::milliseconds kMaxRestartDelay{30'000};
    static constexpr std::chrono::milliseconds kFirstStallDelay{250};
    static constexpr std::chrono::milliseconds kMaxStallDelay{5000};
    static constexpr std::chrono::milliseconds kFirstAssignmentWait{10'000};

    // librdkafka 2.0.2 aborts the process (an assertion in the cooperative-sticky assignor,
    // librdkafka issue 4312, fixed in 2.3.0) when a consumer is destroyed after its group chose the
    // assignor and before its first assignment arrived: a process stopped in the first seconds of
    // its join. A consumer in that window waits for its assignment (at most kFirstAssignmentWait)
    // before it closes; what it polls meanwhile is neither applied nor stored, so it is read again.
    void Close() {
        if (!assigned_once_ && fatal_.empty() &&
            std::string_view(rd_kafka_rebalance_protocol(consumer_.get())) == "COOPERATIVE") {
            const auto deadline = std::chrono::steady_clock::now() + kFirstAssignmentWait;
            while (!assigned_once_ && std::chrono::steady_clock::now() < deadline) {
                const detail::MessagePtr ignored{rd_kafka_consumer_poll(consumer_.get(), 100)};
                if (ignored && ignored->err == RD_KAFKA_RESP_ERR__FATAL) break;  // no assignment will come
            }
        }
        rd_kafka_consumer_close(consumer_.get());
    }

    // The database cannot take work (out of disk, restarting, read-only): the rewound batch waits
    // and is read again, however long that lasts; no record is dead-lettered for it. Logged when
    // it starts, every 30 s while it lasts, and when it ends.
    void Stall(const std::exception& e) {
        const auto now = std::chrono::steady_clock::now();
        if (!stalled_since_) {
            stalled_since_ = now;
            stall_log_ = store::FailureLogLimit{};  // a new stall is logged at once
            stall_delay_ = kFirstStallDelay;
        }
        ++metrics_.database_stalls;
        if (stall_log_.Due(now)) {
            spdlog::error("consumer {}: {} (for {} s); the batch is kept and read again",
                          options_.group_id,
                          store::ExplainDatabaseError(e),
                          std::chrono::duration_cast<std::chrono::seconds>(now - *stalled_since_).count());
        }
        detail::SleepUnless(stopping_, stall_delay_);
        stall_delay_ = std::min(stall_delay_ * 2, kMaxStallDelay);
    }

    void EndStall() {
        if (!stalled_since_) return;
        spdlog::info(
            "consumer {}: the database takes work again after {} s; resumed",
            options_.group_id,
            std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - *stalled_since_)
                .count());
        stalled_since_.reset();
    }

    detail::ClientPtr MakeConsumer() {
        auto conf = detail::MakeConf(consumer_properties_);
        rd_kafka_conf_set_opaque(conf.get(), this);
        rd_kafka_conf_set_stats_cb(conf.get(), [](rd_kafka_t*, char* json, size_t len, void* opaque) {
            static_cast<Impl*>(opaque)->OnStatistics(json, len);
            return 0;
        });
        rd_kafka_conf_set_rebalance_cb(
            conf.get(),
            [](rd_kafka_t* client, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* partitions, void* opaque) {
                static_cast<Impl*>(opaque)->OnRebalance(client, err, partitions);
            });
        auto consumer = detail::MakeClient(RD_KAFKA_CONSUMER, std::move(conf));
        rd_kafka_poll_set_consumer(consumer.get());
        return consumer;
    }

    // Counts failed deliveries: rd_kafka_flush() also returns once every message has *failed*, so
    // the flush alone cannot tell that a dead letter reached the broker.
    detail::ClientPtr MakeDeadLetterProducer() {
        auto conf = detail::MakeProducerConf(dead_letter_properties_);
        rd_kafka_conf_set_opaque(conf.get(), this);
        rd_kafka_conf_set_dr_msg_cb(conf.get(), [](rd_kafka_t*, const rd_kafka_message_t* message, void* opaque) {
            if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
                auto* self = static_cast<Impl*>(opaque);
                ++self->dead_letter_failures_;
                self->dead_letter_error_ = rd_kafka_err2str(message->err);
            }
        });
        return detail::MakeClient(RD_KAFKA_PRODUCER, std::move(conf));
    }

    bool Subscribe() {
        detail::TopicPartitionListPtr topics{
            rd_kafka_topic_partition_list_new(static_cast<int>(options_.topics.size()))};
        for (const auto& topic : options_.topics) {
            rd_kafka_topic_partition_list_add(topics.get(), topic.c_str(), RD_KAFKA_PARTITION_UA);
        }
        if (const auto err = rd_kafka_subscribe(consumer_.get(), topics.get()); err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            spdlog::error("consumer {}: cannot subscribe: {}", options_.group_id, detail::ErrorText(err));
            return false;
        }
        return true;
    }

    // Waits (up to 100 ms) for the first record, then takes what is already there, up to
    // batch_size records or batch_wait of time: a batch never waits for records that have not
    // arrived, so a quiet consumer adds no latency and a busy one still batches.
    std::vector<Record> PollBatch() {
        std::vector<Record> batch;
        std::chrono::steady_clock::time_point deadline{};
        int timeout_ms = 100;
        while (static_cast<int>(batch.size()) < options_.batch_size) {
            detail::MessagePtr message{rd_kafka_consumer_poll(consumer_.get(), timeout_ms)};
            if (!message) break;  // nothing more now (or nothing at all within 100 ms)
            if (timeout_ms != 0) deadline = std::chrono::steady_clock::now() + options_.batch_wait;
            timeout_ms = 0;
            if (message->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) continue;
            if (message->err == RD_KAFKA_RESP_ERR__FATAL) {
                fatal_ = detail::FatalError(consumer_.get());
                if (fatal_.empty()) fatal_ = rd_kafka_message_errstr(message.get());
                return {};
            }
            if (message->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
                spdlog::warn("consumer {}: {}", options_.group_id, rd_kafka_message_errstr(message.get()));
                continue;
            }
            ++metrics_.consumed;
            Record record;
            const std::string_view value(static_cast<const char*>(message->payload), message->len);
            if (auto event = ParseKafkaRecord(value, HeadersOf(message.get()), record.reason, options_.json_limits)) {
                record.inbound = InboundEvent{TopicOf(message.get()),
                                              message->partition,
                                              message->offset,
                                              std::string(static_cast<const char*>(message->key), message->key_len),
                                              std::move(*event)};
            }
            record.message = std::move(message);
            batch.push_back(std::move(record));
            if (std::chrono::steady_clock::now() >= deadline) break;
        }
        return batch;
    }

    void Process(std::vector<Record>& batch) {
        for (auto& record : batch) {
            if (!record.inbound) EnqueueDeadLetter(record, record.reason);
        }
        FlushDeadLetters();
        std::vector<std::string> ids;
        for (const auto& record : batch) {
            if (record.inbound) ids.push_back(record.inbound->event.id);
        }
        if (ids.empty()) return;
        for (bool with_companion = true;;) {
            try {
                own_.Run([&](pqxx::connection& conn) {
                    const auto inbox = InboxStatement(batch, ids, with_companion);
                    store::Transaction tx{conn, inbox.statement};  // BEGIN and the inbox: one round trip
                    if (options_.on_transaction_begin) options_.on_transaction_begin();
                    auto [applied, duplicates, last] = ApplyInTransaction(tx.Work(), batch, inbox, tx.TakeFirst());
                    tx.Commit(last);  // the handler's last write and the COMMIT: one round trip
                    metrics_.applied += applied;
                    metrics_.duplicates += duplicates;
                    if (options_.after_commit) options_.after_commit();
                });
                return;
            } catch (const store::PoolStopped&) {
                throw;  // stopping: the batch is read again after the restart
            } catch (const std::exception& e) {
                if (with_companion && dynamic_cast<const ApplyBatchAgain*>(&e) != nullptr) {
                    spdlog::debug(
                        "consumer {}: batch applied again without the companion ({})", options_.group_id, e.what());
                    with_companion = false;
                    continue;
                }
                if (store::IsTransientDatabaseError(e)) throw;  // the database's fault, not a record's: Stall
                spdlog::warn("consumer {}: batch transaction failed ({}); retrying record by record",
                             options_.group_id,
                             text::Quote(e.what(), 300, false));
            }
            break;
        }
        for (auto& record : batch) {
            if (!record.inbound) continue;
            std::string last_error;
            bool done = false;
            for (int attempt = 1; attempt <= options_.max_handler_attempts && !done && !stopping_.load(); ++attempt) {
                try {
                    own_.Run([&](pqxx::connection& conn) {
                        pqxx::work tx{conn};
                        if (options_.on_transaction_begin) options_.on_transaction_begin();
                        const bool fresh = ApplyOne(tx, record);
                        tx.commit();
                        ++(fresh ? metrics_.applied : metrics_.duplicates);
                        if (options_.after_commit) options_.after_commit();
                    });
                    done = true;
                } catch (const store::PoolStopped&) {
                    throw;  // stopping, not the record's fault: it is read again after the restart
                } catch (const std::exception& e) {
                    // Neither is a database that cannot take work: the whole batch waits (Stall);
                    // the records applied one by one so far are dropped by the inbox on re-reading.
                    if (store::IsTransientDatabaseError(e)) throw;
                    last_error = e.what();
                    std::this_thread::sleep_for(std::chrono::milliseconds(50 * attempt));
                }
            }
            if (!done) {
                if (stopping_.load()) throw std::runtime_error("stopping");
                EnqueueDeadLetter(
                    record,
                    "handler failed " + std::to_string(options_.max_handler_attempts) + " times: " + last_error);
                FlushDeadLetters();
            }
        }
    }

    // The inbox statement (the batch's ids seen for the first time, and the rows of the handler's
    // companion when it has one for this batch: ConsumerOptions::companion), to open the batch's
    // transaction with; none when the inbox is switched off for a test.
    struct Inbox {
        std::optional<store::Statement> statement;
        bool with_companion = false;
    };
    Inbox InboxStatement(const std::vector<Record>& batch, const std::vector<std::string>& ids, bool with_companion) {
        if (store::GuardDisabled("inbox")) return {};
        std::optional<InboxCompanion> companion;
        if (options_.companion && with_companion) {
            std::vector<const InboundEvent*> events;
            for (const auto& record : batch) {
                if (record.inbound) events.push_back(&*record.inbound);
            }
            companion = options_.companion(events);
        }
        if (!companion) return {store::InboxFreshIdsStatement(options_.inbox_name, ids), false};
        return {store::InboxFreshIdsWithStatement(
                    options_.inbox_name, ids, companion->sql, companion->arguments, companion->settings),
                true};
    }

    // Fresh events go to the handler in runs; a duplicate between them is answered in its place
    // (a participant's stored reply must follow the first delivery's).
    // Returns (applied, duplicates), for the metrics once the transaction committed, and the last
    // call's last write, for the commit to carry.
    std::tuple<std::uint64_t, std::uint64_t, LastWrite> ApplyInTransaction(pqxx::transaction_base& tx,
                                                                           std::vector<Record>& batch,
                                                                           const Inbox& inbox,
                                                                           pqxx::result inbox_rows) {
        std::set<std::string> fresh;
        std::optional<pqxx::result> companion_rows;
        if (!inbox.statement) {  // no inbox: every id is fresh
            for (const auto& record : batch) {
                if (record.inbound) fresh.insert(record.inbound->event.id);
            }
        } else if (!inbox.with_companion) {
            const auto ids = store::InboxFreshIdsOf(inbox_rows);
            fresh.insert(ids.begin(), ids.end());
        } else {
            auto with = store::InboxFreshIdsWithOf(std::move(inbox_rows));
            fresh.insert(with.fresh.begin(), with.fresh.end());
            companion_rows = with.CompanionEmpty() ? pqxx::result{} : std::move(with.rows);
        }
        std::vector<const InboundEvent*> run;
        std::uint64_t applied = 0;
        std::uint64_t duplicates = 0;
        LastWrite last;
        const auto flush = [&] {
            if (run.empty()) return;
            RunLastWrite(tx, last);
            last = handler_(tx, run, companion_rows ? &*companion_rows : nullptr);
            companion_rows.reset();  // for the transaction's first call only (ConsumerOptions::companion)
            applied += run.size();
            run.clear();
        };
        for (auto& record : batch) {
            if (!record.inbound) continue;
            if (fresh.erase(record.inbound->event.id) == 0) {  // seen before, or twice in this batch
                ++duplicates;
                if (options_.on_duplicate) {
                    flush();
                    RunLastWrite(tx, last);
                    options_.on_duplicate(tx, *record.inbound);
                    companion_rows.reset();
                }
                continue;
            }
            run.push_back(&*record.inbound);
        }
        flush();
        return {applied, duplicates, std::move(last)};
    }

    // A handler's last write, where something follows it in the transaction.
    static void RunLastWrite(pqxx::transaction_base& tx, LastWrite& last) {
        if (!last) return;
        store::ExecTexts(tx, last->sql, last->params);
        last.reset();
    }

    // True when the record was fresh (applied), false for a duplicate.
    bool ApplyOne(pqxx::transaction_base& tx, Record& record) {
        if (!store::GuardDisabled("inbox") &&
            !store::InboxFirstTime(tx, options_.inbox_name, record.inbound->event.id)) {
            if (options_.on_duplicate) options_.on_duplicate(tx, *record.inbound);
            return false;
        }
        auto last = handler_(tx, {&*record.inbound}, nullptr);
        RunLastWrite(tx, last);
        return true;
    }

    // Produces the record as it came, plus why, to <topic>.dlq. FlushDeadLetters then waits for the
    // broker's acks, once for all of a batch: the offset may be committed only once they are safe.
    void EnqueueDeadLetter(Record& record, const std::string& reason) {
        const rd_kafka_message_t* message = record.message.get();
        const std::string topic = TopicOf(message) + ".dlq";
        detail::HeadersPtr headers{rd_kafka_headers_new(4)};
        rd_kafka_headers_t* original = nullptr;
        if (rd_kafka_message_headers(message, &original) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            headers.reset(rd_kafka_headers_copy(original));
        }
        const std::string where =
            TopicOf(message) + "/" + std::to_string(message->partition) + "@" + std::to_string(message->offset);
        rd_kafka_header_add(
            headers.get(), "sagaflow-dlq-reason", -1, reason.data(), static_cast<ssize_t>(reason.size()));
        rd_kafka_header_add(headers.get(), "sagaflow-dlq-origin", -1, where.data(), static_cast<ssize_t>(where.size()));
        const std::string_view key(static_cast<const char*>(message->key), message->key ? message->key_len : 0);
        std::string_view value(static_cast<const char*>(message->payload), message->payload ? message->len : 0);
        const auto produce = [&] {
            rd_kafka_resp_err_t result;
            while ((result = detail::Produce(dlq_.get(), topic, key, value, headers.get(), nullptr)) ==
                   RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                rd_kafka_poll(dlq_.get(), 10);
            }
            return result;
        };
        rd_kafka_resp_err_t err = produce();
        if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE && !value.empty()) {
            // The record plus the dead-letter headers is over the producer's message.max.bytes: a
            // dead letter that could never be produced would stop the consumer for good. It goes
            // without its value instead; the origin header says where the record still is.
            const std::string omitted = std::to_string(value.size());
            rd_kafka_header_add(
                headers.get(), "sagaflow-dlq-value-omitted", -1, omitted.data(), static_cast<ssize_t>(omitted.size()));
            value = {};
            err = produce();
        }
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (err == RD_KAFKA_RESP_ERR__FATAL) dlq_ = MakeDeadLetterProducer();  // unusable: a new one
            throw std::runtime_error("cannot move " + where + " to " + topic + ": " + detail::ErrorText(err));
        }
        static_cast<void>(headers.release());
        ++unflushed_dead_letters_;
        spdlog::warn("consumer {}: moving {} to {}: {}", options_.group_id, where, topic, text::EscapeControl(reason));
    }

    // The batch's offsets may move only once the broker holds its dead letters; otherwise the
    // batch is read again and they are produced again (at least once; never dropped).
    void FlushDeadLetters() {
        if (unflushed_dead_letters_ == 0) return;
        const auto flushed = rd_kafka_flush(dlq_.get(), 30'000);
        const auto failed = std::exchange(dead_letter_failures_, 0);
        const auto count = std::exchange(unflushed_dead_letters_, 0);
        if (flushed != RD_KAFKA_RESP_ERR_NO_ERROR) {
            throw std::runtime_error("the dead-letter topic did not acknowledge within 30 s");
        }
        if (failed != 0) {
            if (!detail::FatalError(dlq_.get()).empty()) dlq_ = MakeDeadLetterProducer();
            throw std::runtime_error(std::to_string(failed) + " dead letter(s) refused by the broker (" +
                                     dead_letter_error_ + ")");
        }
        metrics_.dead_lettered += count;
    }

    // Per (topic, partition) of the batch: the offset after its last record (to commit), or the
    // offset of its first record (to rewind to).
    enum class Edge { kFirst, kNext };
    static detail::TopicPartitionListPtr BatchOffsets(const std::vector<Record>& batch, Edge edge) {
        std::map<std::pair<std::string, std::int32_t>, std::int64_t> offsets;
        for (const auto& record : batch) {
            const auto where = std::pair{TopicOf(record.message.get()), record.message->partition};
            const std::int64_t offset = record.message->offset + (edge == Edge::kNext ? 1 : 0);
            const auto [it, fresh] = offsets.emplace(where, offset);
            if (!fresh) it->second = edge == Edge::kNext ? std::max(it->second, offset) : std::min(it->second, offset);
        }
        detail::TopicPartitionListPtr list{rd_kafka_topic_partition_list_new(static_cast<int>(offsets.size()))};
        for (const auto& [where, offset] : offsets) {
            rd_kafka_topic_partition_list_add(list.get(), where.first.c_str(), where.second)->offset = offset;
        }
        return list;
    }

    void StoreOffsets(const std::vector<Record>& batch) {
        const auto list = BatchOffsets(batch, Edge::kNext);
        // Stored for librdkafka's next commit: the batch is applied in the database already, so a
        // commit that is lost (a crash before it) only means a redelivery, which the inbox drops. A
        // partition revoked meanwhile is refused here (its new owner reads from the last commit).
        if (const auto err = rd_kafka_offsets_store(consumer_.get(), list.get()); err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            spdlog::warn("consumer {}: offset store failed: {}", options_.group_id, detail::ErrorText(err));
        }
    }

    // Seeks each partition of the batch back to its first record; what failed, or empty. A
    // partition no longer assigned (revoked while the batch was read) is no failure: its next
    // owner reads it from the committed offset, which this batch never moved.
    std::string Rewind(const std::vector<Record>& batch) {
        const auto list = BatchOffsets(batch, Edge::kFirst);
        if (store::TestFault("rewind")) return "test fault";
        if (rd_kafka_error_t* error = rd_kafka_seek_partitions(consumer_.get(), list.get(), 5000)) {
            std::string text = rd_kafka_error_string(error);
            rd_kafka_error_destroy(error);
            return text;
        }
        rd_kafka_topic_partition_list_t* raw = nullptr;
        if (const auto err = rd_kafka_assignment(consumer_.get(), &raw); err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            return "cannot read the assignment: " + detail::ErrorText(err);
        }
        const detail::TopicPartitionListPtr assigned{raw};
        std::string failed;
        for (int i = 0; i < list->cnt; ++i) {
            const auto& sought = list->elems[i];
            if (sought.err == RD_KAFKA_RESP_ERR_NO_ERROR ||
                rd_kafka_topic_partition_list_find(assigned.get(), sought.topic, sought.partition) == nullptr) {
                continue;
            }
            failed += fmt::format("{}{}[{}]: {}",
                                  failed.empty() ? "" : ", ",
                                  sought.topic,
                                  sought.partition,
                                  detail::ErrorText(sought.err));
        }
        return failed;
    }

    // Called from the poll, between batches. With the cooperative protocol only the partitions that
    // change owner are handed over, incrementally; the others keep being consumed throughout. A
    // revoked partition's stored offsets are committed by librdkafka before it goes.
    void OnRebalance(rd_kafka_t* client, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* partitions) {
        const bool cooperative = std::string_view(rd_kafka_rebalance_protocol(client)) == "COOPERATIVE";
        const bool assign = err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
        rd_kafka_error_t* error = nullptr;
        rd_kafka_resp_err_t eager_err = RD_KAFKA_RESP_ERR_NO_ERROR;
        if (cooperative) {
            error = assign ? rd_kafka_incremental_assign(client, partitions)
                           : rd_kafka_incremental_unassign(client, partitions);
        } else {
            eager_err = rd_kafka_assign(client, assign ? partitions : nullptr);
        }
        std::string names;
        for (int i = 0; i < partitions->cnt; ++i) {
            names += (i == 0 ? "" : " ") + std::string(partitions->elems[i].topic) + "[" +
                     std::to_string(partitions->elems[i].partition) + "]";
        }
        if (error != nullptr) {
            spdlog::warn("consumer {}: {} failed: {}",
                         options_.group_id,
                         assign ? "assign" : "unassign",
                         rd_kafka_error_string(error));
            rd_kafka_error_destroy(error);
        } else if (eager_err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            spdlog::warn("consumer {}: assign failed: {}", options_.group_id, detail::ErrorText(eager_err));
        }
        if (assign) assigned_once_ = true;  // an empty assignment too (Close)
        if (cooperative) {
            metrics_.assigned += assign ? partitions->cnt : -partitions->cnt;
        } else {
            metrics_.assigned = assign ? partitions->cnt : 0;
        }
        ++metrics_.rebalances;
        spdlog::info("consumer {}: {} {} partition(s) ({}; {} protocol); holds {} now",
                     options_.group_id,
                     assign ? "assigned" : "revoked",
                     partitions->cnt,
                     names.empty() ? "none" : names,
                     cooperative ? "cooperative" : "eager",
                     metrics_.assigned.load());
    }

    void OnStatistics(const char* json, size_t len) {
        const auto stats = nlohmann::json::parse(json, json + len, nullptr, false);
        if (!stats.is_object() || !stats.contains("topics")) return;
        std::int64_t lag = 0;
        for (const auto& [name, topic] : stats["topics"].items()) {
            if (!topic.contains("partitions")) continue;
            for (const auto& [id, partition] : topic["partitions"].items()) {
                const auto value = partition.value("consumer_lag", std::int64_t{-1});
                if (id != "-1" && value > 0) lag += value;
            }
        }
        metrics_.lag = lag;
    }

    // The batches' transactions run on the consumer's thread, on a connection of its own: through
    // a pool worker each batch cost two thread wake-ups (the worker's, then the consumer's).
    store::OwnConnection own_;
    ConsumerOptions options_;
    std::unique_ptr<InstanceSlot> slot_;  // the derived group.instance.id, held while the consumer lives
    BatchHandler handler_;
    ConsumerMetrics& metrics_;
    std::atomic<bool>& stopping_;
    KafkaProperties consumer_properties_;
    detail::ClientPtr consumer_;
    KafkaProperties dead_letter_properties_;
    detail::ClientPtr dlq_;
    std::uint64_t dead_letter_failures_ = 0;  // failed DLQ deliveries since the last flush (consumer thread)
    std::string dead_letter_error_;
    std::optional<std::chrono::steady_clock::time_point> stalled_since_;  // set while the database stalls us
    store::FailureLogLimit stall_log_;                                    // when the stall is logged again (every 30 s)
    std::chrono::milliseconds stall_delay_{kFirstStallDelay};
    std::string fatal_;           // the consumer's fatal error, when it has raised one (consumer thread only)
    bool assigned_once_ = false;  // this client has had an assignment, maybe empty (consumer thread only)
    std::uint64_t unflushed_dead_letters_ = 0;  // consumer thread only
};

Consumer::Consumer(store::ConnectionPool& pool, ConsumerOptions options, EventHandler handler)
    : Consumer(pool,
               std::move(options),
               BatchHandler([handler = std::move(handler)](pqxx::transaction_base& tx,
                                                           const std::vector<const InboundEvent*>& events,
                                                           const pqxx::result*) {
                   for (const InboundEvent* event : events) handler(tx, *event);
                   return LastWrite{};
               })) {}

Consumer::Consumer(store::ConnectionPool& pool, ConsumerOptions options, BatchHandler handler)
    : impl_(std::make_unique<Impl>(pool, std::move(options), std::move(handler), metrics_, stopping_)) {}

Consumer::~Consumer() {
    Stop();
}

void Consumer::Start() {
    if (thread_.joinable()) return;
    stopping_ = false;
    thread_ = store::NamedThread("sf-consumer", [this] { impl_->Run(); });
}

void Consumer::Stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
}

}  // namespace sagaflow::outbox
