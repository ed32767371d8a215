#include "participant/participant.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/text_scan.hpp"
#include "outbox/admin.hpp"
#include "outbox/consumer.hpp"
#include "outbox/relay.hpp"
#include "outbox/runtime.hpp"
#include "outbox/writer.hpp"
#include "store/array_columns.hpp"
#include "store/inbox.hpp"
#include "store/migrations.hpp"
#include "store/pool.hpp"
#include "store/prepared.hpp"
#include "store/sweeper.hpp"
#include "store/test_guards.hpp"

namespace sagaflow {

// --- Transaction -------------------------------------------------------------------------------------

namespace {

// What a Transaction stands for: the consumer's transaction, and the statements of sagaflow's that the
// handler's first statement carries in its round trip (its savepoint, RunHandler); empty once sent.
struct HandlerScope {
    pqxx::transaction_base* tx;
    std::string before;
};

pqxx::result Run(void* native, const std::string& sql, const std::vector<Transaction::Param>& params) {
    auto& scope = *static_cast<HandlerScope*>(native);
    std::vector<const char*> raw;
    raw.reserve(params.size());
    for (const auto& p : params) raw.push_back(p ? p->c_str() : nullptr);  // a null pointer binds SQL NULL
    // Prepared, up to a bound per connection (the text is the user's and may vary without bound).
    return store::ExecForeign(*scope.tx, sql, raw, store::kMaxForeignStatements, std::exchange(scope.before, {}));
}

}  // namespace

std::vector<Transaction::Row> Transaction::Query(const std::string& sql, const std::vector<Param>& params) {
    const auto result = Run(native_, sql, params);
    std::vector<Row> rows;
    rows.reserve(result.size());
    for (const auto& r : result) {
        Row row;
        for (const auto& field : r) {
            row.push_back(field.is_null() ? std::nullopt : std::optional<std::string>(field.c_str()));
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

std::uint64_t Transaction::Execute(const std::string& sql, const std::vector<Param>& params) {
    return static_cast<std::uint64_t>(Run(native_, sql, params).affected_rows());
}

// --- StepReply ---------------------------------------------------------------------------------------

StepReply StepReply::Success(nlohmann::json data) {
    return {Outcome::kSuccess, std::move(data)};
}

StepReply StepReply::Failure(const std::string& reason, nlohmann::json data) {
    data["reason"] = reason;
    return {Outcome::kFailure, std::move(data)};
}

StepReply StepReply::Retry(const std::string& reason) {
    return {Outcome::kRetry, {{"reason", reason}}};
}

// --- Participant ---------------------------------------------------------------------------------------

namespace {

const char* OutcomeText(StepReply::Outcome outcome) {
    switch (outcome) {
        case StepReply::Outcome::kSuccess:
            return "success";
        case StepReply::Outcome::kFailure:
            return "failure";
        case StepReply::Outcome::kRetry:
            return "retry";
    }
    return "failure";
}

// `url` with `search_path` set to `schema` (libpq's `options` parameter).
std::string WithSchema(const std::string& url, const std::string& schema) {
    if (schema.empty()) return url;
    return url + (url.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" + schema;
}

bool ValidSchemaName(const std::string& schema) {
    if (schema.empty() || schema.size() > 63) return false;
    if (!(std::islower(static_cast<unsigned char>(schema[0])) || schema[0] == '_')) return false;
    for (const char c : schema) {
        if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_')) {
            return false;
        }
    }
    return true;
}

}  // namespace

// See Participant::Impl::Start.
constexpr int kMaxCommandsPerTransaction = 64;

class Participant::Impl {
  public:
    explicit Impl(ParticipantConfig config) : config_(std::move(config)) {
        if (config_.name.empty()) {
            throw ParticipantError(
                "the participant has no name. Hint: set ParticipantConfig::name to the `participant:` "
                "of its saga steps");
        }
        if (config_.database_url.empty())
            throw ParticipantError("no database URL. Hint: set ParticipantConfig::database_url");
        if (config_.kafka_brokers.empty())
            throw ParticipantError("no Kafka brokers. Hint: set ParticipantConfig::kafka_brokers");
        if (!config_.schema.empty() && !ValidSchemaName(config_.schema)) {
            throw ParticipantError("schema '" + config_.schema +
                                   "' is not a plain lowercase SQL name. Hint: use letters, "
                                   "digits and '_'");
        }
        if (config_.consumer_group.empty()) config_.consumer_group = "sagaflow-participant-" + config_.name;
        url_ = WithSchema(config_.database_url, config_.schema);
        source_ = "sagaflow-participant/" + config_.name;
    }

    ~Impl() { Stop(); }

    void On(const std::string& phase, const std::string& type, CommandHandler handler) {
        handlers_[{phase, type}] = std::move(handler);
    }

    void Setup(std::function<void(Transaction&)> setup) { setups_.push_back(std::move(setup)); }

    void Start() {
        if (parts_.pool) return;
        try {
            store::ValidateTtl(config_.inbox_ttl);  // before anything starts
        } catch (const std::invalid_argument& e) {
            throw std::invalid_argument(std::string("ParticipantConfig::inbox_ttl: ") + e.what());
        }
        if (!config_.schema.empty()) {
            auto conn = store::ConnectOnce(config_.database_url);
            pqxx::work tx{*conn};
            store::LockSetup(tx);
            tx.exec("CREATE SCHEMA IF NOT EXISTS " + tx.quote_name(config_.schema));
            tx.commit();
        }
        if (config_.run_migrations) store::MigrateBlocking(url_, store::BuiltinMigrations());
        parts_.StartPool(url_, config_.database_pool_size);
        if (!setups_.empty()) {
            parts_.pool->RunBlocking([&](pqxx::connection& conn) {
                pqxx::work tx{conn};
                store::LockSetup(tx);
                tx.exec(store::kUserStatementPlans);
                HandlerScope scope{&tx, {}};
                Transaction t{&scope};
                for (const auto& setup : setups_) setup(t);
                tx.commit();
            });
        }
        parts_.StartSweeper(config_.inbox_ttl);
        const std::string commands = config_.name + ".commands";
        if (config_.create_topics) {
            outbox::EnsureTopicsBlocking(config_.kafka_brokers,
                                         config_.kafka_properties,
                                         {commands, config_.replies_topic},
                                         config_.topic_partitions);
        }
        if (config_.run_relay) {
            parts_.StartRelay(url_, config_.kafka_brokers, config_.kafka_properties);
        }
        outbox::ConsumerOptions options;
        options.brokers = config_.kafka_brokers;
        options.group_id = config_.consumer_group;
        options.topics = {commands};
        options.inbox_name = config_.consumer_group;
        options.properties = config_.kafka_properties;
        for (const auto& [key, value] : config_.consumer_properties) options.properties[key] = value;
        options.static_membership = config_.static_membership;
        options.json_limits.max_depth = config_.max_json_depth;
        // Each handler runs in a savepoint of its own: a transaction whose subtransactions that
        // wrote number more than 64 (PostgreSQL's PGPROC_MAX_CACHED_SUBXIDS) overflows the
        // backend's cache of them, and while it runs every other session's snapshot has to look
        // transaction ids up in pg_subtrans — the known slowdown, here reached whenever a
        // participant drained a backlog in the consumer's batches of 200.
        options.batch_size = std::min(options.batch_size, kMaxCommandsPerTransaction);
        options.on_duplicate = [this](pqxx::transaction_base& tx, const outbox::InboundEvent& in) {
            OnCommand(tx, in);
        };
        options.on_transaction_begin = [this] { pending_ = {}; };
        options.after_commit = [this] {
            applied_ += pending_.applied;
            replayed_ += pending_.replayed;
            null_compensations_ += pending_.null_compensations;
            refused_late_actions_ += pending_.refused_late_actions;
            retries_ += pending_.retries;
            for (const auto& warning : pending_.warnings) spdlog::warn("{}", text::EscapeControl(warning));
            pending_ = {};
        };
        options.companion = StoredRowsRead;
        parts_.StartConsumer(options,
                             [this](pqxx::transaction_base& tx,
                                    const std::vector<const outbox::InboundEvent*>& events,
                                    const pqxx::result* companion) { return OnCommands(tx, events, companion); });
        spdlog::info("participant {}: consuming {}", config_.name, commands);
    }

    void Stop() { parts_.Stop(); }

    ParticipantMetrics Metrics() const {
        ParticipantMetrics m;
        m.applied = applied_;
        m.replayed = replayed_;
        m.null_compensations = null_compensations_;
        m.refused_late_actions = refused_late_actions_;
        m.retries = retries_;
        if (parts_.consumer) {
            m.duplicates = parts_.consumer->Metrics().duplicates;
            m.consumer_restarts = parts_.consumer->Metrics().restarts;
            m.database_stalls = parts_.consumer->Metrics().database_stalls;
        }
        return m;
    }

    const std::string& Url() const noexcept { return url_; }

  private:
    using Key = std::tuple<std::string, std::string, std::string>;  // (saga, step, phase)
    struct Stored {
        std::string status, reply, reply_event_id;
    };
    // A command batch's bookkeeping: the stored rows of its commands read with one statement, and
    // its replies (outbox row, and the stored reply if any) written with one statement at the end.
    struct Batch {
        std::map<Key, std::optional<Stored>> loaded;            // nullopt: no row
        std::set<std::pair<std::string, std::string>> touched;  // (saga, step) written by this batch
        store::ArrayColumns replies{{{"saga_id", "uuid"},
                                     {"step_name", "text"},
                                     {"phase", "text"},
                                     {"command_type", "text"},
                                     {"command_event_id", "uuid"},
                                     {"status", "text"},
                                     {"reply", "text"},
                                     {"store", "bool"},
                                     {"event_id", "uuid"},
                                     {"topic", "text"},
                                     {"message_key", "text"},
                                     {"headers", "text"},
                                     {"payload", "text"}}};
        // A handler of this batch left its savepoint open (released by the next handler's
        // SAVEPOINT, or by the COMMIT).
        bool savepoint_open = false;
        // The batch's first attempt, given the companion's rows: its statement set the user's
        // planner settings for the transaction, and its first handler runs without a savepoint
        // (RunHandler).
        bool first_attempt = false;
        bool savepoint_free = false;
        bool Empty() const { return replies.Rows() == 0; }
    };

    static bool IsCommand(const outbox::CloudEvent& e) {
        return store::IsUuid(e.saga_id) && !e.step_name.empty() && (e.phase == "action" || e.phase == "compensation");
    }

    // The stored rows of a batch's sagas, locked: the consumer reads them with its inbox statement
    // (ConsumerOptions::companion), or OnCommands does. By saga id alone (a saga has a few rows
    // here): an index scan of the primary key. A join with arrays of the three key columns took
    // 0.76 ms a call (pg_stat_statements) against 0.05 ms for the engine's lookups of this shape.
    // Locked in key order.
    static std::optional<outbox::InboxCompanion> StoredRowsRead(
        const std::vector<const outbox::InboundEvent*>& events) {
        std::vector<std::string> sagas;
        for (const outbox::InboundEvent* in : events) {
            if (IsCommand(in->event)) sagas.push_back(in->event.saga_id);
        }
        if (sagas.empty()) return std::nullopt;
        return outbox::InboxCompanion{
            "SELECT saga_id::text, step_name, phase, status, reply::text, coalesce(reply_event_id::text, '') FROM "
            "participant_step WHERE saga_id = ANY($1::uuid[]) ORDER BY participant_step.saga_id, step_name, phase "
            "FOR UPDATE",
            {store::UuidArray(sagas)},
            store::kUserStatementPlansCalls};
    }

    // `companion`: StoredRowsRead's rows, read with the inbox statement; nullptr: read them here.
    // Returns the batch's replies and stored rows as its last write (outbox::LastWrite).
    outbox::LastWrite OnCommands(pqxx::transaction_base& tx,
                                 const std::vector<const outbox::InboundEvent*>& events,
                                 const pqxx::result* companion) {
        Batch batch;
        if (companion != nullptr) {
            batch.first_attempt = batch.savepoint_free = true;
            redo_retry_.reset();  // a new batch: a Retry remembered for another attempt is stale
        }
        for (const outbox::InboundEvent* in : events) {
            const auto& e = in->event;
            if (!IsCommand(e)) continue;
            for (const std::string& phase : {std::string("action"), e.phase}) {
                batch.loaded.emplace(Key{e.saga_id, e.step_name, phase}, std::nullopt);
            }
        }
        if (!batch.loaded.empty()) {
            std::optional<pqxx::result> read;
            if (companion == nullptr) {
                const auto statement = StoredRowsRead(events);
                read = store::ExecTexts(tx, statement->sql, statement->arguments);
            }
            for (const auto& row : companion != nullptr ? *companion : *read) {
                const auto it = batch.loaded.find(
                    Key{row[0].as<std::string>(), row[1].as<std::string>(), row[2].as<std::string>()});
                if (it == batch.loaded.end()) continue;  // another step of the saga
                it->second = Stored{row[3].as<std::string>(), row[4].as<std::string>(), row[5].as<std::string>()};
            }
        }
        for (const outbox::InboundEvent* in : events) OnCommand(tx, *in, &batch);
        return FlushStatement(batch);
    }

    // The stored row of `key`: from the batch's read unless this batch wrote that step since (then
    // its queued writes go first and the row is read again).
    std::optional<Stored> Lookup(pqxx::transaction_base& tx, const Key& key, Batch* batch) {
        const auto& [saga_id, step_name, phase] = key;
        if (batch != nullptr) {
            if (batch->touched.count({saga_id, step_name}) == 0) {
                if (const auto it = batch->loaded.find(key); it != batch->loaded.end()) return it->second;
            }
            Flush(tx, *batch);
        }
        const auto rows = store::Exec(tx,
                                      "SELECT status, reply::text, coalesce(reply_event_id::text, '') FROM "
                                      "participant_step WHERE saga_id = $1::uuid AND step_name = $2 AND phase = $3 "
                                      "FOR UPDATE",
                                      saga_id,
                                      step_name,
                                      phase);
        if (rows.empty()) return std::nullopt;
        return Stored{rows[0][0].as<std::string>(), rows[0][1].as<std::string>(), rows[0][2].as<std::string>()};
    }

    // One command, first delivery or repeated, inside the inbox transaction; `batch` (a batch of
    // fresh commands) queues its reply, without it the reply is written at once.
    void OnCommand(pqxx::transaction_base& tx, const outbox::InboundEvent& in, Batch* batch = nullptr) {
        const outbox::CloudEvent& e = in.event;
        if (!IsCommand(e)) {
            pending_.warnings.push_back(
                fmt::format("participant {}: event {} ({}) is not a saga command (sagaid, stepname, phase); ignored",
                            config_.name,
                            e.id,
                            text::Quote(e.type)));
            return;
        }
        const Command command{e.saga_id, e.step_name, e.phase, e.type, e.id, e.data, e.traceparent, e.tracestate};
        const auto stored = Lookup(tx, {command.saga_id, command.step_name, command.phase}, batch);
        std::optional<Stored> action;
        if (!stored && command.phase == "compensation") {
            action = Lookup(tx, {command.saga_id, command.step_name, "action"}, batch);
        }
        if (batch != nullptr) batch->touched.insert({command.saga_id, command.step_name});
        if (stored) {
            // Answered before: the same reply again, never the effect again. A tombstone answers the
            // late action it was waiting for.
            // TEST ONLY: a participant that skips what it has seen, for the conformance kit to catch.
            if (store::GuardDisabled("reanswer")) return;
            if (batch != nullptr) Flush(tx, *batch);  // replies leave in the order of their commands
            if (stored->status == "refused" && stored->reply_event_id.empty()) {
                ++pending_.refused_late_actions;
                pending_.warnings.push_back(
                    fmt::format("participant {}: action {} of saga {} arrived after its compensation; refused",
                                config_.name,
                                command.step_name,
                                command.saga_id));
            } else {
                ++pending_.replayed;
            }
            Resend(tx, command, nlohmann::json::parse(stored->reply), stored->reply_event_id);
            return;
        }
        if (command.phase == "compensation") {
            if (!action || action->status != "succeeded") {
                NullCompensation(tx, command, !action, batch);
                return;
            }
        }
        const auto handler = handlers_.find({command.phase, command.type});
        if (handler == handlers_.end()) {
            // Not stored: once the handler is deployed, the engine's resend runs it.
            Reply(tx,
                  command,
                  StepReply::Failure("participant '" + config_.name + "' has no handler for " + command.phase + " " +
                                     command.type),
                  batch);
            return;
        }
        StepReply reply;
        if (redo_retry_ && redo_retry_->first == command.event_id) {
            // The batch's first attempt ran this handler without a savepoint, and it answered Retry
            // (RunHandler): the same answer, not a second call of the handler.
            reply = std::move(redo_retry_->second);
            redo_retry_.reset();
        } else {
            reply = RunHandler(tx, handler->second, command, batch);
        }
        if (reply.outcome == StepReply::Outcome::kRetry) {
            ++pending_.retries;
            Reply(tx, command, reply, batch);
            return;
        }
        ReplyAndStore(
            tx, command, reply.outcome == StepReply::Outcome::kSuccess ? "succeeded" : "failed", reply, batch);
        ++pending_.applied;
    }

    // Runs the handler in a savepoint of its own, so that a Retry answer leaves nothing behind.
    // (Plain SQL: libpqxx 6.4's subtransaction opens its savepoint lazily, and not for
    // exec_params.) The savepoint travels with the handler's first statement, in its round trip
    // (`SAVEPOINT …; EXECUTE …`, store::ExecForeign's `before`); a handler that runs no SQL takes
    // none and has nothing to roll back. In a batch the savepoint stays open after the handler: the
    // next handler's first statement releases it and opens its own, and the COMMIT releases the
    // last. Alone (a duplicate's handler between the batch's runs) a handler releases its own, so
    // the batch's stays the newest of the name. The same statements hand the planner back to the
    // server's settings for the user's SQL (the batch's read before ran on sagaflow's:
    // store::UseOwnStatementPlans); the rest of the transaction keeps them (its writes, and a
    // duplicate's lookup by the whole primary key, plan alike either way).
    //
    // The first handler of a batch's first attempt needs no savepoint: the companion statement set
    // the planner settings, and nothing the transaction did before the handler needs keeping if it
    // answers Retry — the batch's replays and null compensations are redone from the stored rows.
    // So that answer rolls the whole batch back (ApplyBatchAgain) and is remembered for the second
    // attempt, which takes savepoints and does not call this handler again.
    StepReply RunHandler(pqxx::transaction_base& tx,
                         const CommandHandler& handler,
                         const Command& command,
                         Batch* batch) {
        const bool savepoint = batch == nullptr || !batch->savepoint_free;
        HandlerScope scope{&tx, {}};
        if (savepoint) {
            const bool release_first = batch != nullptr && batch->savepoint_open;
            const bool plans_set = batch != nullptr && batch->first_attempt;
            scope.before = (plans_set ? std::string() : store::kUserStatementPlans) +
                           (release_first ? "RELEASE SAVEPOINT sagaflow_handler; SAVEPOINT sagaflow_handler; "
                                          : "SAVEPOINT sagaflow_handler; ");
        } else {
            batch->savepoint_free = false;
        }
        Transaction handler_tx{&scope};
        StepReply reply = handler(handler_tx, command);
        // Whether the savepoint went out with a statement of the handler's. A handler that ran no SQL
        // took none: nothing to roll back or release (an earlier handler's stays open for the next).
        const bool taken = savepoint && scope.before.empty();
        if (taken && batch != nullptr) batch->savepoint_open = true;
        if (!savepoint) {
            if (reply.outcome == StepReply::Outcome::kRetry) {
                redo_retry_.emplace(command.event_id, reply);
                throw outbox::ApplyBatchAgain("the handler of " + command.phase + " " + command.type + " of saga " +
                                              command.saga_id + " answered Retry without a savepoint");
            }
        } else if (taken && reply.outcome == StepReply::Outcome::kRetry) {
            tx.exec("ROLLBACK TO SAVEPOINT sagaflow_handler");  // the savepoint itself stays
        } else if (taken && batch == nullptr) {
            tx.exec("RELEASE SAVEPOINT sagaflow_handler");
        }
        return reply;
    }

    void NullCompensation(pqxx::transaction_base& tx, const Command& command, bool action_never_seen, Batch* batch) {
        if (action_never_seen && !store::GuardDisabled("anti-hanging")) {
            // The tombstone: the action, should it still come, is refused.
            store::Exec(tx,
                        "INSERT INTO participant_step (saga_id, step_name, phase, command_type, status, reply) VALUES "
                        "($1::uuid, $2, 'action', '', 'refused', $3::jsonb) ON CONFLICT DO NOTHING",
                        command.saga_id,
                        command.step_name,
                        ReplyData(StepReply::Failure("the step was compensated before its action arrived")).dump());
        }
        const StepReply reply = StepReply::Success({{"nullCompensation", true}});
        ReplyAndStore(tx, command, "null_compensation", reply, batch);
        ++pending_.null_compensations;
    }

    static nlohmann::json ReplyData(const StepReply& reply) {
        nlohmann::json data = reply.data.is_object() ? reply.data : nlohmann::json{{"value", reply.data}};
        data["outcome"] = OutcomeText(reply.outcome);
        return data;
    }

    // A reply that is not stored (a Retry, no handler): the engine's next resend asks again.
    void Reply(pqxx::transaction_base& tx, const Command& command, const StepReply& reply, Batch* batch) {
        Queue(tx, command, {}, ReplyData(reply), batch);
    }

    outbox::CloudEvent ReplyEvent(const Command& command, const nlohmann::json& data) const {
        outbox::CloudEvent event;
        event.type = command.type + ".reply";
        event.source = source_;
        event.saga_id = command.saga_id;
        event.step_name = command.step_name;
        event.phase = command.phase;
        event.correlation_id = command.event_id;
        event.traceparent = command.traceparent;
        event.tracestate = command.tracestate;
        event.data = data;
        return event;
    }

    std::string EnqueueReply(pqxx::transaction_base& tx, const Command& command, const nlohmann::json& data) {
        return outbox::Enqueue(tx, config_.replies_topic, command.saga_id, ReplyEvent(command, data));
    }

    // The stored reply again: the same event (re-armed) if it was sent, else a first one now.
    void Resend(pqxx::transaction_base& tx,
                const Command& command,
                const nlohmann::json& data,
                const std::string& reply_id) {
        if (!reply_id.empty() && outbox::Rearm(tx, reply_id)) return;
        const std::string id = EnqueueReply(tx, command, data);
        store::Exec(
            tx,
            "UPDATE participant_step SET reply_event_id = $4::uuid, command_event_id = coalesce(command_event_id, "
            "$5::uuid) WHERE saga_id = $1::uuid AND step_name = $2 AND phase = $3",
            command.saga_id,
            command.step_name,
            command.phase,
            id,
            command.event_id);
    }

    // The reply into the outbox and the stored reply into participant_step.
    void ReplyAndStore(pqxx::transaction_base& tx,
                       const Command& command,
                       const std::string& status,
                       const StepReply& reply,
                       Batch* batch) {
        Queue(tx, command, status, ReplyData(reply), batch);
    }

    // Queues a reply (stored in participant_step with `status`, unless that is empty) in `batch`, or
    // writes it at once without one.
    void Queue(pqxx::transaction_base& tx,
               const Command& command,
               const std::string& status,
               const nlohmann::json& data,
               Batch* batch) {
        Batch own;
        Batch& b = batch != nullptr ? *batch : own;
        const outbox::OutboxRow row =
            outbox::MakeOutboxRow(config_.replies_topic, command.saga_id, ReplyEvent(command, data), 1);
        std::vector<store::ArrayColumns::Value> values{command.saga_id,
                                                       command.step_name,
                                                       command.phase,
                                                       command.type,
                                                       command.event_id,
                                                       status,
                                                       data.dump(),
                                                       status.empty() ? "f" : "t"};
        for (std::size_t i = 0; i < 5; ++i) values.emplace_back(row.params.at(i));
        b.replies.Add(std::move(values));
        if (batch == nullptr) Flush(tx, own);
    }

    // The queued replies, in order, and their stored copies: one statement, one round trip.
    void Flush(pqxx::transaction_base& tx, Batch& batch) {
        if (const auto statement = FlushStatement(batch)) store::ExecTexts(tx, statement->sql, statement->params);
    }
    // The same statement, to run later (the consumer sends a batch's last with its COMMIT).
    static std::optional<store::Statement> FlushStatement(Batch& batch) {
        if (batch.Empty()) return std::nullopt;
        store::ArrayStatement statement;
        const std::string sql =
            "WITH v AS (SELECT * FROM " + statement.Unnest(batch.replies, "u", true) + "), reply AS (" +
            outbox::InsertRowsFrom("v") +
            ") INSERT INTO participant_step (saga_id, step_name, phase, command_type, command_event_id, status, "
            "reply, reply_event_id) SELECT saga_id, step_name, phase, command_type, command_event_id, status, "
            "reply::jsonb, event_id FROM v WHERE store ORDER BY n";
        auto out = statement.ToStatement(sql);
        batch.replies.Clear();
        return out;
    }

    ParticipantConfig config_;
    std::string url_;
    std::string source_;
    std::map<std::pair<std::string, std::string>, CommandHandler> handlers_;  // (phase, type) -> handler
    std::vector<std::function<void(Transaction&)>> setups_;
    outbox::Runtime parts_;  // pool, relay, command consumer
    std::atomic<std::uint64_t> applied_{0}, replayed_{0}, null_compensations_{0}, refused_late_actions_{0}, retries_{0};
    // What the transaction in progress counted and would log, added to the metrics above and logged
    // once it commits: a batch that rolls back and is applied again record by record counts and
    // logs once. Touched on the consumer thread that runs its transaction, one transaction
    // at a time.
    struct Counts {
        std::uint64_t applied = 0, replayed = 0, null_compensations = 0, refused_late_actions = 0, retries = 0;
        std::vector<std::string> warnings;
    };
    Counts pending_;
    // (command event id, answer): a Retry of a handler run without a savepoint, for the batch's
    // second attempt (RunHandler). Same thread as `pending_`.
    std::optional<std::pair<std::string, StepReply>> redo_retry_;
};

Participant::Participant(ParticipantConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Participant::~Participant() = default;

void Participant::OnAction(const std::string& command_type, CommandHandler handler) {
    impl_->On("action", command_type, std::move(handler));
}

void Participant::OnCompensation(const std::string& command_type, CommandHandler handler) {
    impl_->On("compensation", command_type, std::move(handler));
}

void Participant::Setup(std::function<void(Transaction&)> setup) {
    impl_->Setup(std::move(setup));
}

void Participant::Start() {
    impl_->Start();
}

void Participant::Stop() {
    impl_->Stop();
}

ParticipantMetrics Participant::Metrics() const {
    return impl_->Metrics();
}

const std::string& Participant::DatabaseUrl() const noexcept {
    return impl_->Url();
}

}  // namespace sagaflow
