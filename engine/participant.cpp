#include "engine/participant.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <pqxx/pqxx>

#include "engine/detail/runtime.hpp"
#include "engine/engine.hpp"
#include "outbox/admin.hpp"
#include "outbox/consumer.hpp"
#include "outbox/relay.hpp"
#include "outbox/writer.hpp"
#include "store/inbox.hpp"
#include "store/migrations.hpp"
#include "store/pool.hpp"
#include "store/prepared.hpp"
#include "store/test_guards.hpp"

namespace sagaflow {

// --- Transaction -------------------------------------------------------------------------------------

namespace {

pqxx::result Run(void* native, const std::string& sql, const std::vector<Transaction::Param>& params) {
    auto& tx = *static_cast<pqxx::transaction_base*>(native);
    std::vector<const char*> raw;
    raw.reserve(params.size());
    for (const auto& p : params) raw.push_back(p ? p->c_str() : nullptr);  // a null pointer binds SQL NULL
    // Not prepared: the text is the user's and may vary without bound (prepared statements stay on
    // the server for the connection's life).
    return tx.exec_params(sql, pqxx::prepare::make_dynamic_params(raw));
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

class Participant::Impl {
  public:
    explicit Impl(ParticipantConfig config) : config_(std::move(config)) {
        if (config_.name.empty()) {
            throw EngineError(
                "the participant has no name. Hint: set ParticipantConfig::name to the `participant:` "
                "of its saga steps");
        }
        if (config_.database_url.empty())
            throw EngineError("no database URL. Hint: set ParticipantConfig::database_url");
        if (config_.kafka_brokers.empty())
            throw EngineError("no Kafka brokers. Hint: set ParticipantConfig::kafka_brokers");
        if (!config_.schema.empty() && !ValidSchemaName(config_.schema)) {
            throw EngineError("schema '" + config_.schema +
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
        if (!config_.schema.empty()) {
            auto conn = store::ConnectOnce(config_.database_url);
            pqxx::work tx{*conn};
            tx.exec("CREATE SCHEMA IF NOT EXISTS " + tx.quote_name(config_.schema));
            tx.commit();
        }
        if (config_.run_migrations) store::MigrateBlocking(url_, store::BuiltinMigrations());
        parts_.StartPool(url_, config_.database_pool_size);
        if (!setups_.empty()) {
            parts_.pool->RunBlocking([&](pqxx::connection& conn) {
                pqxx::work tx{conn};
                Transaction t{static_cast<pqxx::transaction_base*>(&tx)};
                for (const auto& setup : setups_) setup(t);
                tx.commit();
            });
        }
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
        options.on_duplicate = [this](pqxx::work& tx, const outbox::InboundEvent& in) { OnCommand(tx, in); };
        parts_.StartConsumer(options, [this](pqxx::work& tx, const std::vector<const outbox::InboundEvent*>& events) {
            for (const outbox::InboundEvent* in : events) OnCommand(tx, *in);
        });
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
        if (parts_.consumer) m.duplicates = parts_.consumer->Metrics().duplicates;
        return m;
    }

    const std::string& Url() const noexcept { return url_; }

  private:
    // One command, first delivery or repeated, inside the inbox transaction.
    void OnCommand(pqxx::work& tx, const outbox::InboundEvent& in) {
        const outbox::CloudEvent& e = in.event;
        if (!store::IsUuid(e.saga_id) || e.step_name.empty() || (e.phase != "action" && e.phase != "compensation")) {
            spdlog::warn("participant {}: event {} ({}) is not a saga command (sagaid, stepname, phase); ignored",
                         config_.name,
                         e.id,
                         e.type);
            return;
        }
        const Command command{e.saga_id, e.step_name, e.phase, e.type, e.id, e.data};
        const auto stored =
            store::Exec(tx,
                        "SELECT status, reply::text, coalesce(reply_event_id::text, '') FROM participant_step "
                        "WHERE saga_id = $1::uuid AND step_name = $2 AND phase = $3 FOR UPDATE",
                        command.saga_id,
                        command.step_name,
                        command.phase);
        if (!stored.empty()) {
            // Answered before: the same reply again, never the effect again. A tombstone answers the
            // late action it was waiting for.
            const std::string status = stored[0][0].as<std::string>();
            if (status == "refused" && stored[0][2].as<std::string>().empty()) {
                ++refused_late_actions_;
                spdlog::warn("participant {}: action {} of saga {} arrived after its compensation; refused",
                             config_.name,
                             command.step_name,
                             command.saga_id);
            } else {
                ++replayed_;
            }
            Resend(tx, command, nlohmann::json::parse(stored[0][1].c_str()), stored[0][2].as<std::string>());
            return;
        }
        if (command.phase == "compensation") {
            const auto action = store::Exec(
                tx,
                "SELECT status FROM participant_step WHERE saga_id = $1::uuid AND step_name = $2 AND phase = 'action' "
                "FOR UPDATE",
                command.saga_id,
                command.step_name);
            if (action.empty() || action[0][0].as<std::string>() != "succeeded") {
                NullCompensation(tx, command, action.empty());
                return;
            }
        }
        const auto handler = handlers_.find({command.phase, command.type});
        if (handler == handlers_.end()) {
            // Not stored: once the handler is deployed, the engine's resend runs it.
            Reply(tx,
                  command,
                  StepReply::Failure("participant '" + config_.name + "' has no handler for " + command.phase + " " +
                                     command.type));
            return;
        }
        // A savepoint, so that a Retry answer leaves nothing behind. (Plain SQL: libpqxx 6.4's
        // subtransaction opens its savepoint lazily, and not for exec_params.)
        tx.exec("SAVEPOINT sagaflow_handler");
        Transaction handler_tx{static_cast<pqxx::transaction_base*>(&tx)};
        const StepReply reply = handler->second(handler_tx, command);
        tx.exec(reply.outcome == StepReply::Outcome::kRetry ? "ROLLBACK TO SAVEPOINT sagaflow_handler"
                                                            : "RELEASE SAVEPOINT sagaflow_handler");
        if (reply.outcome == StepReply::Outcome::kRetry) {
            ++retries_;
            Reply(tx, command, reply);
            return;
        }
        ReplyAndStore(tx, command, reply.outcome == StepReply::Outcome::kSuccess ? "succeeded" : "failed", reply);
        ++applied_;
    }

    void NullCompensation(pqxx::work& tx, const Command& command, bool action_never_seen) {
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
        ReplyAndStore(tx, command, "null_compensation", reply);
        ++null_compensations_;
    }

    static nlohmann::json ReplyData(const StepReply& reply) {
        nlohmann::json data = reply.data.is_object() ? reply.data : nlohmann::json{{"value", reply.data}};
        data["outcome"] = OutcomeText(reply.outcome);
        return data;
    }

    std::string Reply(pqxx::work& tx, const Command& command, const StepReply& reply) {
        return EnqueueReply(tx, command, ReplyData(reply));
    }

    outbox::CloudEvent ReplyEvent(const Command& command, const nlohmann::json& data) const {
        outbox::CloudEvent event;
        event.type = command.type + ".reply";
        event.source = source_;
        event.saga_id = command.saga_id;
        event.step_name = command.step_name;
        event.phase = command.phase;
        event.correlation_id = command.event_id;
        event.data = data;
        return event;
    }

    std::string EnqueueReply(pqxx::work& tx, const Command& command, const nlohmann::json& data) {
        return outbox::Enqueue(tx, config_.replies_topic, command.saga_id, ReplyEvent(command, data));
    }

    // The stored reply again: the same event (re-armed) if it was sent, else a first one now.
    void Resend(pqxx::work& tx, const Command& command, const nlohmann::json& data, const std::string& reply_id) {
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

    // The reply into the outbox and the stored reply into participant_step: one statement, one
    // round trip.
    void ReplyAndStore(pqxx::work& tx, const Command& command, const std::string& status, const StepReply& reply) {
        const nlohmann::json data = ReplyData(reply);
        const outbox::OutboxRow row =
            outbox::MakeOutboxRow(config_.replies_topic, command.saga_id, ReplyEvent(command, data), 9);
        std::vector<std::string> texts{command.saga_id,
                                       command.step_name,
                                       command.phase,
                                       command.type,
                                       command.event_id,
                                       status,
                                       data.dump(),
                                       row.event_id};
        texts.insert(texts.end(), row.params.begin(), row.params.end());
        store::ExecTexts(
            tx,
            "WITH reply AS (" + row.sql +
                ") INSERT INTO participant_step (saga_id, step_name, phase, command_type, command_event_id, "
                "status, reply, reply_event_id) VALUES ($1::uuid, $2, $3, $4, $5::uuid, $6, $7::jsonb, "
                "$8::uuid)",
            texts);
    }

    ParticipantConfig config_;
    std::string url_;
    std::string source_;
    std::map<std::pair<std::string, std::string>, CommandHandler> handlers_;  // (phase, type) -> handler
    std::vector<std::function<void(Transaction&)>> setups_;
    detail::Runtime parts_;  // pool, relay, command consumer
    std::atomic<std::uint64_t> applied_{0}, replayed_{0}, null_compensations_{0}, refused_late_actions_{0}, retries_{0};
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
