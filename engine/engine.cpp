#include "engine/engine.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fstream>
#include <future>
#include <mutex>
#include <pqxx/pqxx>
#include <random>
#include <shared_mutex>
#include <thread>

#include "engine/definition_loader.hpp"
#include "engine/detail/engine_internals.hpp"
#include "engine/detail/http_server.hpp"
#include "engine/detail/runtime.hpp"
#include "engine/detail/saga_store.hpp"
#include "engine/detail/timer_loop.hpp"
#include "engine/detail/yaml_reader.hpp"
#include "engine/retention.hpp"
#include "outbox/admin.hpp"
#include "outbox/consumer.hpp"
#include "outbox/group_progress.hpp"
#include "outbox/relay.hpp"
#include "outbox/uuid.hpp"
#include "store/errors.hpp"
#include "store/inbox.hpp"
#include "store/migrations.hpp"
#include "store/pool.hpp"
#include "store/prepared.hpp"
#include "store/sweeper.hpp"
#include "store/url.hpp"

namespace sagaflow {
namespace {

namespace asio = boost::asio;
using detail::LoadedSaga;
using detail::LockMode;

std::string DefaultInstanceId() {
    std::array<char, 256> host{};
    if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
    return std::string(host.data()) + "-" + std::to_string(getpid());
}

std::string Text(const pqxx::field& field) {
    return field.is_null() ? std::string() : field.as<std::string>();
}

nlohmann::json Json(const pqxx::field& field) {
    return field.is_null() ? nlohmann::json() : nlohmann::json::parse(field.c_str());
}

// Timestamps leave the database as RFC 3339 UTC with milliseconds.
constexpr const char* kTimeFormat = "'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'";

std::string Rfc3339(const std::string& column) {
    return "to_char(" + column + " AT TIME ZONE 'UTC', " + kTimeFormat + ")";
}

// What a transaction did that the world may learn only once it committed: counters, step
// latencies, log lines. Gathered while it runs and applied after its commit (Impl::Apply); a
// rolled-back transaction's are dropped with it, so a reply batch retried record by record counts
// and logs each reply once.
struct SideEffects {
    std::vector<std::pair<std::string, double>> latencies;
    std::uint64_t finished = 0, replies_applied = 0, replies_ignored = 0;
    std::vector<std::string> parked;                // "saga ... parked as failed: ..." lines
    std::optional<std::chrono::milliseconds> poke;  // the soonest timer the transaction set

    void Latencies(std::vector<std::pair<std::string, double>> more) {
        latencies.insert(latencies.end(), more.begin(), more.end());
    }
    void Poke(std::optional<std::chrono::milliseconds> delay) {
        if (delay && (!poke || *delay < *poke)) poke = delay;
    }
};

struct Counters {
    std::atomic<std::uint64_t> sagas_started{0}, replies_applied{0}, replies_ignored{0}, timers_fired{0},
        sagas_finished{0}, sagas_parked{0}, sagas_cancelled{0};
};

}  // namespace

class Engine::Impl {
  public:
    Impl(EngineConfig config, Engine& owner) : config_(std::move(config)), owner_(owner) {
        if (config_.database_url.empty()) {
            throw EngineError(
                "no database URL. Hint: set EngineConfig::database_url (configuration file: db.url; sagaflow "
                "run: --db or SAGAFLOW_DB_URL)");
        }
        if ((config_.process_sagas || config_.run_relay) && config_.kafka_brokers.empty()) {
            throw EngineError(
                "no Kafka brokers. Hint: set EngineConfig::kafka_brokers (configuration file: kafka.brokers; "
                "sagaflow run: --brokers or SAGAFLOW_KAFKA_BROKERS)");
        }
        if (config_.database_pool_size < 2) {
            throw EngineError(
                "database_pool_size must be at least 2 (the reply consumer and the timers each hold "
                "one connection while they work)");
        }
        named_instance_ = !config_.instance_id.empty();
        if (config_.instance_id.empty()) config_.instance_id = DefaultInstanceId();
        if (config_.http.enabled) {
            try {
                store::ValidateTtl(config_.http.idempotency_ttl);
            } catch (const std::exception& e) {
                throw EngineError(std::string("http.idempotency_ttl: ") + e.what());
            }
        }
        if (config_.history_retention) {
            prune_.emplace();
            prune_->older_than = *config_.history_retention;
            try {
                ValidatePruneOptions(*prune_);
            } catch (const std::exception& e) {
                throw EngineError(std::string("history_retention: ") + e.what());
            }
        }
        source_ = "sagaflow/" + config_.instance_id;
    }

    ~Impl() { Stop(); }

    // --- definitions -------------------------------------------------------------------------------

    // Checked against what is registered, then written to the database (when started), and only
    // then known in memory: a definition the database refuses changes nothing here.
    std::string Register(LoadResult loaded, std::string source) {
        if (!loaded.definition) throw DefinitionError(std::move(loaded.diagnostics));
        auto definition = std::make_shared<const SagaDefinition>(std::move(*loaded.definition));
        const auto refuse_conflict = [&] {
            for (const auto& [hash, known] : by_hash_) {
                if (known->name == definition->name && known->version == definition->version &&
                    hash != definition->hash) {
                    throw EngineError("saga '" + definition->name + "' version " + std::to_string(definition->version) +
                                      " is already registered with other content. Hint: bump `version:` in the "
                                      "changed file; running sagas keep the version they started with");
                }
            }
        };
        {
            std::shared_lock lock(definitions_mutex_);
            refuse_conflict();
        }
        if (parts_.pool) {
            parts_.pool->RunBlocking([&](pqxx::connection& conn) {
                pqxx::work tx{conn};
                WriteDefinition(tx, *definition, source);
                tx.commit();
            });
        }
        std::unique_lock lock(definitions_mutex_);
        refuse_conflict();  // another thread may have registered the same version meanwhile
        by_hash_[definition->hash] = definition;
        sources_[definition->hash] = source;
        auto& latest = latest_[definition->name];
        if (!latest || latest->version < definition->version) latest = definition;
        if (progress_) {
            for (const auto& step : definition->steps) {
                progress_->Follow(ParticipantGroup(step.participant), step.CommandTopic());
            }
        }
        return definition->hash;
    }

    // The definition a saga is pinned to: registered here, or (another engine registered it, or a
    // newer one replaced it before a restart) read back from saga_definition.
    std::shared_ptr<const SagaDefinition> Definition(pqxx::transaction_base& tx,
                                                     const std::string& type,
                                                     const std::string& hash) {
        {
            std::shared_lock lock(definitions_mutex_);
            if (const auto it = by_hash_.find(hash); it != by_hash_.end()) return it->second;
        }
        auto definition = std::make_shared<const SagaDefinition>(detail::ReadStoredDefinition(tx, type, hash));
        std::unique_lock lock(definitions_mutex_);
        by_hash_.emplace(hash, definition);
        return definition;
    }

    static void WriteDefinition(pqxx::transaction_base& tx,
                                const SagaDefinition& definition,
                                const std::string& source) {
        tx.exec_params(
            "INSERT INTO saga_definition (saga_type, version, hash, canonical, source) VALUES ($1, $2, $3, $4::jsonb, "
            "$5) ON CONFLICT DO NOTHING",
            definition.name,
            definition.version,
            definition.hash,
            definition.Canonical().dump(),
            source);
        const auto row = tx.exec_params("SELECT hash FROM saga_definition WHERE saga_type = $1 AND version = $2",
                                        definition.name,
                                        definition.version);
        if (!row.empty() && row[0][0].as<std::string>() != definition.hash) {
            throw EngineError("saga '" + definition.name + "' version " + std::to_string(definition.version) +
                              " is already in the database with other content (hash " + row[0][0].as<std::string>() +
                              "). Hint: bump `version:` in the changed file; running sagas keep the version they "
                              "started with");
        }
    }

    // --- lifecycle ---------------------------------------------------------------------------------

    void Start() {
        if (started_) return;
        started_ = true;  // a failure below leaves the parts that started for Stop() (and the destructor)
        const std::string redacted = store::RedactUrl(config_.database_url);
        if (config_.run_migrations) {
            const auto report = store::MigrateBlocking(config_.database_url, store::BuiltinMigrations());
            static_cast<void>(report);
        }
        // Every statement of the engine is an index lookup, prepared once per connection and
        // planned once (store::UseOwnStatementPlans).
        // The HTTP API's requests run their database work on this pool too, at most one per
        // worker: a connection each on top of database_pool_size, so a burst of requests waiting
        // in the database never holds the connections the reply consumer and the timers need.
        const int http_connections = config_.http.enabled ? std::max(1, config_.http.worker_threads) : 0;
        parts_.StartPool(config_.database_url, config_.database_pool_size + http_connections);
        {
            std::shared_lock lock(definitions_mutex_);
            parts_.pool->RunBlocking([&](pqxx::connection& conn) {
                pqxx::work tx{conn};
                for (const auto& [hash, definition] : by_hash_) WriteDefinition(tx, *definition, sources_.at(hash));
                tx.commit();
            });
        }
        if (config_.create_topics && (config_.process_sagas || config_.run_relay)) {
            std::vector<std::string> topics{config_.replies_topic};
            std::shared_lock lock(definitions_mutex_);
            for (const auto& [hash, definition] : by_hash_) {
                for (const auto& step : definition->steps) topics.push_back(step.CommandTopic());
            }
            std::sort(topics.begin(), topics.end());
            topics.erase(std::unique(topics.begin(), topics.end()), topics.end());
            outbox::EnsureTopicsBlocking(
                config_.kafka_brokers, config_.kafka_properties, topics, config_.topic_partitions);
        }
        if (config_.run_relay) {
            parts_.StartRelay(config_.database_url, config_.kafka_brokers, config_.kafka_properties);
        }
        if (config_.process_sagas) {
            outbox::ConsumerOptions consumer_options;
            consumer_options.brokers = config_.kafka_brokers;
            consumer_options.group_id = config_.consumer_group;
            consumer_options.topics = {config_.replies_topic};
            consumer_options.inbox_name = config_.consumer_group;  // shared by every instance of the group
            consumer_options.properties = config_.kafka_properties;
            for (const auto& [key, value] : config_.consumer_properties) consumer_options.properties[key] = value;
            // A named instance joins under its name; otherwise the consumer derives a stable id.
            consumer_options.static_membership = config_.static_membership;
            if (config_.static_membership && named_instance_) {
                consumer_options.properties.try_emplace("group.instance.id", config_.instance_id);
            }
            // A batch's side effects wait for its commit (and go with its rollback).
            consumer_options.on_transaction_begin = [this] { reply_effects_ = {}; };
            consumer_options.after_commit = [this] { Apply(std::exchange(reply_effects_, {})); };
            parts_.StartConsumer(consumer_options,
                                 [this](pqxx::work& tx, const std::vector<const outbox::InboundEvent*>& events) {
                                     OnReplies(tx, events, reply_effects_);
                                 });

            // The two clocks of a step timeout (HoldTimeout) read the groups' progress from Kafka.
            progress_ = std::make_unique<outbox::GroupProgress>(config_.kafka_brokers, config_.kafka_properties);
            progress_->Follow(config_.consumer_group, config_.replies_topic, true);
            {
                std::shared_lock lock(definitions_mutex_);
                for (const auto& [hash, definition] : by_hash_) {
                    for (const auto& step : definition->steps) {
                        progress_->Follow(ParticipantGroup(step.participant), step.CommandTopic());
                    }
                }
            }
            progress_->Start();

            const auto active = parts_.pool->RunBlocking([](pqxx::connection& conn) {
                pqxx::read_transaction tx{conn};
                return tx.exec("SELECT count(*) FROM saga_instance WHERE status IN ('running', 'compensating')")[0][0]
                    .as<std::int64_t>();
            });
            spdlog::info("engine {}: resuming {} unfinished saga(s) on {}", config_.instance_id, active, redacted);
        }
        if (config_.process_sagas || config_.http.enabled) {
            io_.restart();
            work_.emplace(asio::make_work_guard(io_));
            io_thread_ = std::thread([this] { io_.run(); });
        }
        if (config_.process_sagas) {
            timers_.Start(*parts_.pool);
        }
        // The inbox of replies and the HTTP idempotency records, whichever this engine has.
        // With a history retention, the same daily pass deletes the finished sagas past it.
        store::Sweeper::Extra prune;
        if (config_.process_sagas && prune_) {
            prune = [options = *prune_](pqxx::connection& conn) {
                return Describe(PruneHistory(conn, options), options);
            };
        }
        if (config_.process_sagas || config_.http.enabled) {
            parts_.StartSweeper(config_.http.idempotency_ttl, std::move(prune));
        }
        if (config_.http.enabled) {
            http_ = std::make_unique<detail::HttpServer>(io_, owner_, config_);
            http_->Start();
        }
    }

    void Stop() {
        started_ = false;
        // Nothing waits for the database from here on: the sweep, the timer scan and a consumer
        // batch waiting for a connection (PostgreSQL down) fail, so the joins below return.
        parts_.BeginStop();
        // Reverse order of Start: http, timers, then (parts_.Stop) sweeper, consumer, relay, pool.
        if (http_) http_->Stop();
        if (io_thread_.joinable()) {
            io_.stop();
            io_thread_.join();
            work_.reset();
        }
        timers_.Stop();  // waits for the scan in flight
        http_.reset();
        if (progress_) progress_->Stop();
        parts_.Stop();
    }

    // --- starting and reading sagas ----------------------------------------------------------------

    StartResult StartSaga(const std::string& type,
                          nlohmann::json input,
                          const std::string& key,
                          const TraceContext& trace) {
        RequireStarted();
        std::shared_ptr<const SagaDefinition> definition;
        // Refused without a connection: bad input gets its answer while the database is away too.
        if (auto refusal = Refusal(type, input, definition)) return std::move(*refusal);
        detail::PendingStart pending;
        const StartResult result = parts_.pool->RunBlocking([&](pqxx::connection& conn) {
            pqxx::work tx{conn};
            StartResult r = StartWith(tx, *definition, type, input, key, trace, pending);
            if (r.status == StartResult::Status::kStarted) tx.commit();
            return r;
        });
        Committed(result, pending);
        return result;
    }

    // A start's database work: the saga row (or the one its key started before), its first steps
    // and their commands.
    StartResult StartWith(pqxx::work& tx,
                          const SagaDefinition& definition,
                          const std::string& type,
                          const nlohmann::json& input,
                          const std::string& key,
                          const TraceContext& trace,
                          detail::PendingStart& pending) {
        StartResult r;
        LoadedSaga saga;
        saga.saga_id = outbox::NewUuidV7();
        saga.saga_type = type;
        saga.definition_hash = definition.hash;
        saga.input = input;
        if (outbox::ValidTraceparent(trace.traceparent)) {
            saga.traceparent = trace.traceparent;
            if (outbox::ValidTracestate(trace.tracestate)) saga.tracestate = trace.tracestate;
        }
        const auto decision = machine::Decide(definition, saga.state, machine::Begin{});
        detail::WriteBatch writes;
        SideEffects none;  // a start finishes no step and parks nothing
        const auto effects = PersistLocked(tx,
                                           definition,
                                           saga,
                                           decision,
                                           none,
                                           {{"started", {}, {}, 0, {}, {{"version", definition.version}}}},
                                           &writes);
        // The saga row with its first state, its timeline and its first commands in one
        // statement; nothing if the key started a saga before.
        if (writes.InsertStarted(
                tx,
                {type,
                 definition.version,
                 definition.hash,
                 input.dump(),
                 key.empty() ? std::nullopt : std::optional<std::string>(key),
                 saga.traceparent,
                 saga.tracestate,
                 definition.deadline ? std::optional<std::int64_t>(definition.deadline->count()) : std::nullopt})) {
            RecordLatencies(writes.Flush(tx));
            pending.next_timer = effects.next_timer;
            if (definition.deadline && (!pending.next_timer || *definition.deadline < *pending.next_timer)) {
                pending.next_timer = *definition.deadline;
            }
            r.status = StartResult::Status::kStarted;
            r.saga_id = saga.saga_id;
            return r;
        }
        // The key was used: jsonb equality ignores key order and whitespace, so the same input
        // written differently is still the same command.
        const auto existing =
            store::Exec(tx,
                        "SELECT saga_id::text, input = $3::jsonb FROM saga_instance WHERE saga_type = $1 AND "
                        "idempotency_key = $2",
                        type,
                        key,
                        input.dump());
        r.saga_id = existing.at(0)[0].as<std::string>();
        if (existing[0][1].as<bool>()) {
            r.status = StartResult::Status::kReplayed;
        } else {
            r.status = StartResult::Status::kConflict;
            r.message = "idempotency key '" + key + "' already started saga " + r.saga_id +
                        " with other input. Hint: use a new key for a new request";
        }
        return r;
    }

    // After the commit of a start: counted, and the timer scan told of the first deadline.
    void Committed(const StartResult& result, const detail::PendingStart& pending) {
        if (result.status != StartResult::Status::kStarted) return;
        ++counters_.sagas_started;
        Poke(pending.next_timer);
    }

    std::optional<SagaView> GetSaga(const std::string& saga_id) {
        RequireStarted();
        if (!store::IsUuid(saga_id)) return std::nullopt;
        return parts_.pool->RunBlocking([&](pqxx::connection& conn) {
            pqxx::read_transaction tx{conn};
            return detail::ReadSagaView(tx, saga_id);
        });
    }

    std::optional<std::string> SagaGraph(const std::string& saga_id, GraphFormat format) {
        RequireStarted();
        if (!store::IsUuid(saga_id)) return std::nullopt;
        return parts_.pool->RunBlocking([&](pqxx::connection& conn) -> std::optional<std::string> {
            pqxx::read_transaction tx{conn};
            const auto view = detail::ReadSagaView(tx, saga_id);
            if (!view) return std::nullopt;
            const auto overlay = detail::OverlayOf(*view);
            return RenderGraph(*Definition(tx, view->saga_type, view->definition_hash), format, &overlay);
        });
    }

    SagaPage ListSagas(const ListQuery& query) {
        RequireStarted();
        const int limit = std::clamp(query.limit, 1, 500);
        return parts_.pool->RunBlocking([&](pqxx::connection& conn) {
            pqxx::read_transaction tx{conn};
            // Planned for the filters given (a rare status has an index of its own), not with the
            // generic plan the engine's sessions keep for their key lookups.
            tx.exec("SET LOCAL plan_cache_mode = force_custom_plan");
            // Keyset paging on the saga id: UUID v7 ids sort by creation time.
            const auto rows = tx.exec_params(detail::ListSagasStatement(),
                                             query.status,
                                             query.saga_type,
                                             store::IsUuid(query.cursor) ? query.cursor : std::string(),
                                             limit + 1);
            SagaPage page;
            for (const auto& row : rows) {
                if (static_cast<int>(page.items.size()) == limit) {
                    page.next_cursor = page.items.back().saga_id;
                    break;
                }
                page.items.push_back({Text(row[0]), Text(row[1]), Text(row[2]), Text(row[3]), Text(row[4])});
            }
            return page;
        });
    }

    // An operator's action on one saga: `act` runs under the saga's row lock in a transaction it
    // commits; Result::Status::kNotFound when there is no saga of that id.
    template <typename Result, typename Act>
    Result OnLockedSaga(const std::string& saga_id, Act act) {
        RequireStarted();
        Result none;
        none.status = Result::Status::kNotFound;
        none.message = "no saga " + saga_id;
        if (!store::IsUuid(saga_id)) return none;
        return parts_.pool->RunBlocking([&](pqxx::connection& conn) {
            pqxx::work tx{conn};
            const auto saga = detail::LockSaga(tx, saga_id, LockMode::kWait);
            return saga ? act(tx, *saga) : none;
        });
    }

    RetryResult RetrySaga(const std::string& saga_id) {
        const auto result = OnLockedSaga<RetryResult>(saga_id, [&](pqxx::work& tx, const LoadedSaga& saga) {
            RetryResult r;
            if (saga.state.status != machine::SagaStatus::kFailed) {
                r.status = RetryResult::Status::kNotParked;
                r.message = "saga " + saga_id + " is " + std::string(machine::ToString(saga.state.status)) +
                            "; only a saga parked as failed can be retried";
                return r;
            }
            const std::string step = detail::ReopenParked(tx, saga);
            tx.commit();
            r.message = "step '" + step + "' gets one more attempt now";
            return r;
        });
        if (result.status == RetryResult::Status::kResumed) Poke(std::chrono::milliseconds(0));
        return result;
    }

    // Cancels a locked saga for `reason` (the caller commits): the decision is persisted with its
    // `cancelled` timeline entry, or nothing is written and `refused` says why the machine refused.
    struct Cancellation {
        std::string refused;
        machine::SagaStatus status = machine::SagaStatus::kRunning;  // after the decision
        std::string step;                                            // the step that was in flight
        detail::Effects effects;
        SideEffects side;  // applied once the caller committed
    };
    Cancellation CancelLocked(pqxx::work& tx,
                              const SagaDefinition& definition,
                              const LoadedSaga& saga,
                              const std::string& reason) {
        Cancellation c;
        const auto decision = machine::Decide(definition, saga.state, machine::Cancel{reason});
        c.status = decision.state.status;
        if (!decision.ignored.empty()) {
            c.refused = decision.ignored;
            return c;
        }
        c.step = definition.steps[saga.state.current_step].name;
        const auto* action = saga.state.Find(c.step, machine::Phase::kAction);
        nlohmann::json detail = nlohmann::json::object();
        if (!reason.empty()) detail["reason"] = reason;
        c.effects = PersistLocked(
            tx, definition, saga, decision, c.side, {{"cancelled", c.step, "action", action->attempt, {}, detail}});
        return c;
    }

    // After a cancellation committed.
    void Cancelled(const std::string& saga_id, const std::string& reason) {
        ++counters_.sagas_cancelled;
        spdlog::info("saga {} cancelled{}", saga_id, reason.empty() ? "" : ": " + reason);
    }

    CancelResult CancelSaga(const std::string& saga_id, const std::string& reason) {
        detail::Effects effects;
        SideEffects side;
        const auto result = OnLockedSaga<CancelResult>(saga_id, [&](pqxx::work& tx, const LoadedSaga& saga) {
            CancelResult r;
            auto cancellation = CancelLocked(tx, *Definition(tx, saga.saga_type, saga.definition_hash), saga, reason);
            r.saga_status = std::string(machine::ToString(cancellation.status));
            if (!cancellation.refused.empty()) {
                const bool undoing = saga.state.status == machine::SagaStatus::kCompensating ||
                                     saga.state.status == machine::SagaStatus::kCompensated;
                r.status = undoing ? CancelResult::Status::kAlreadyCompensating : CancelResult::Status::kNotCancellable;
                r.message = "saga " + saga_id + " cannot be cancelled: " + cancellation.refused;
                return r;
            }
            tx.commit();
            effects = std::move(cancellation.effects);
            side = std::move(cancellation.side);
            r.message = "step '" + cancellation.step + "' and the steps before it are being compensated";
            return r;
        });
        if (result.status == CancelResult::Status::kCancelled) {
            Apply(std::move(side));
            Cancelled(saga_id, reason);
            Poke(effects.next_timer);
        }
        return result;
    }

    EngineGauges ReadGauges() {
        RequireStarted();
        return parts_.pool->RunBlocking([](pqxx::connection& conn) {
            pqxx::read_transaction tx{conn};
            EngineGauges g;
            for (const auto& row : tx.exec(detail::OpenSagasStatement())) {
                g.sagas[{row[0].as<std::string>(), row[1].as<std::string>()}] = row[2].as<long long>();
            }
            const auto outbox = tx.exec1(
                "SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8 FROM "
                "outbox WHERE published_at IS NULL");
            g.outbox_backlog = outbox[0].as<long long>();
            g.oldest_unpublished_seconds = outbox[1].as<double>();
            return g;
        });
    }

    // The checks of a start before any database work: the type is registered and the input matches
    // its schema (`input` gets the defaults). nullopt when both hold; `definition` is then the
    // latest version of the type.
    std::optional<StartResult> Refusal(const std::string& type,
                                       nlohmann::json& input,
                                       std::shared_ptr<const SagaDefinition>& definition) const {
        {
            std::shared_lock lock(definitions_mutex_);
            if (const auto it = latest_.find(type); it != latest_.end()) definition = it->second;
        }
        StartResult result;
        if (!definition) {
            result.status = StartResult::Status::kUnknownType;
            result.message = "no saga type '" + type + "' is registered";
            return result;
        }
        result.errors = ValidateInput(*definition, input);
        if (!result.errors.empty()) {
            result.status = StartResult::Status::kInvalidInput;
            result.message = "the input does not match the input schema of saga '" + type + "'";
            return result;
        }
        return std::nullopt;
    }

    bool KnowsType(const std::string& type) const {
        std::shared_lock lock(definitions_mutex_);
        return latest_.count(type) != 0;
    }

    store::ConnectionPool& Pool() {
        RequireStarted();
        return *parts_.pool;
    }

    EngineMetrics Metrics() const {
        EngineMetrics m;
        m.sagas_started = counters_.sagas_started;
        m.replies_applied = counters_.replies_applied;
        m.replies_ignored = counters_.replies_ignored;
        m.timers_fired = counters_.timers_fired;
        m.sagas_finished = counters_.sagas_finished;
        m.sagas_parked = counters_.sagas_parked;
        m.sagas_cancelled = counters_.sagas_cancelled;
        if (parts_.consumer) {
            m.reply_duplicates = parts_.consumer->Metrics().duplicates;
            m.consumer_restarts = parts_.consumer->Metrics().restarts;
            m.database_stalls = parts_.consumer->Metrics().database_stalls;
        }
        if (parts_.relay) {
            m.outbox_published = parts_.relay->Metrics().published;
            m.relay_errors = parts_.relay->Metrics().retried + parts_.relay->Metrics().failed_batches;
        }
        std::lock_guard lock(latency_mutex_);
        m.step_latency = latency_;
        return m;
    }

    const EngineConfig& Config() const noexcept { return config_; }
    int HttpPort() const noexcept { return http_ ? http_->Port() : 0; }

  private:
    void RequireStarted() const {
        if (!started_) throw EngineError("the engine is not started. Hint: call Engine::Start() first");
    }

    // Writes the decision; what it means for metrics and logs goes to `side`, for after the commit.
    detail::Effects PersistLocked(pqxx::transaction_base& tx,
                                  const SagaDefinition& definition,
                                  const LoadedSaga& saga,
                                  const machine::Decision& decision,
                                  SideEffects& side,
                                  std::vector<detail::TimelineRow> timeline = {},
                                  detail::WriteBatch* batch = nullptr) {
        detail::Effects effects;
        {
            std::lock_guard lock(rng_mutex_);
            effects = detail::Persist(tx, definition, saga, decision, source_, rng_, std::move(timeline), batch);
        }
        side.Latencies(effects.step_latencies);
        if (effects.finished) ++side.finished;
        if (effects.parked) {
            side.parked.push_back(fmt::format(
                "saga {} ({}) parked as failed: {}", saga.saga_id, saga.saga_type, decision.state.parked_reason));
        }
        return effects;
    }

    // After the commit of the transaction that gathered them.
    void Apply(SideEffects side) {
        RecordLatencies(side.latencies);
        counters_.sagas_finished += side.finished;
        counters_.replies_applied += side.replies_applied;
        counters_.replies_ignored += side.replies_ignored;
        counters_.sagas_parked += side.parked.size();
        for (const auto& line : side.parked) spdlog::error("{}", line);
        Poke(side.poke);
    }

    void RecordLatencies(const std::vector<std::pair<std::string, double>>& latencies) {
        if (latencies.empty()) return;
        std::lock_guard lock(latency_mutex_);
        for (const auto& [step, seconds] : latencies) {
            auto& h = latency_[step];
            for (std::size_t b = 0; b < StepLatency::kBuckets.size(); ++b) {
                if (seconds <= StepLatency::kBuckets[b]) ++h.counts[b];
            }
            ++h.count;
            h.sum += seconds;
        }
    }

    // --- replies (consumer thread, inside the inbox transaction) ------------------------------------

    // A batch of replies: their sagas are locked and loaded with two statements, in saga id order,
    // and their writes go out with one statement per table at the end (detail::WriteBatch).
    void OnReplies(pqxx::work& tx, const std::vector<const outbox::InboundEvent*>& events, SideEffects& side) {
        std::vector<std::string> ids;
        for (const outbox::InboundEvent* in : events) {
            if (store::IsUuid(in->event.saga_id)) ids.push_back(in->event.saga_id);
        }
        auto locked = detail::LockSagas(tx, ids, LockMode::kWait);
        detail::WriteBatch writes;
        for (const outbox::InboundEvent* in : events) OnReply(tx, *in, locked, writes, side);
        side.Latencies(writes.Flush(tx));
    }

    // `locked`: sagas locked and loaded for this reply's batch; taken from it once (a second reply
    // of the same saga in the batch reads what the first one wrote, flushed from `writes` first).
    void OnReply(pqxx::work& tx,
                 const outbox::InboundEvent& in,
                 std::map<std::string, LoadedSaga>& locked,
                 detail::WriteBatch& writes,
                 SideEffects& side) {
        const outbox::CloudEvent& e = in.event;
        const std::string outcome_text = e.data.is_object() ? e.data.value("outcome", std::string()) : std::string();
        const auto ignore = [&](const std::string& saga_id, const std::string& why) {
            ++side.replies_ignored;
            spdlog::debug("reply {} ignored: {}", e.id, why);
            writes.Record(saga_id,
                          {"ignored",
                           e.step_name,
                           e.phase,
                           0,
                           e.id,
                           {{"reason", why}, {"type", e.type}, {"outcome", outcome_text}}});
        };
        if (!store::IsUuid(e.saga_id)) return ignore({}, "the reply names no saga (sagaid '" + e.saga_id + "')");
        const auto phase = detail::ParsePhase(e.phase);
        if (!phase) return ignore({}, "unknown phase '" + e.phase + "'");
        machine::Outcome outcome;
        if (outcome_text == "success") {
            outcome = machine::Outcome::kSuccess;
        } else if (outcome_text == "failure") {
            outcome = machine::Outcome::kFailure;
        } else if (outcome_text == "retry") {
            outcome = machine::Outcome::kRetry;
        } else {
            return ignore({}, "data.outcome must be success, failure or retry, not '" + outcome_text + "'");
        }
        std::optional<LoadedSaga> saga;
        if (const auto it = locked.find(e.saga_id); it != locked.end()) {
            saga = std::move(it->second);
            locked.erase(it);
        } else {
            if (writes.Holds(e.saga_id)) side.Latencies(writes.Flush(tx));
            saga = detail::LockSaga(tx, e.saga_id, LockMode::kWait);
        }
        if (!saga) return ignore({}, "no saga " + e.saga_id);
        const auto definition = Definition(tx, saga->saga_type, saga->definition_hash);
        const machine::StepPhaseState* current = saga->state.Find(e.step_name, *phase);
        if (current != nullptr && !e.correlation_id.empty()) {
            const auto command = saga->command_ids.find({e.step_name, e.phase});
            if (command != saga->command_ids.end() && command->second != e.correlation_id) {
                return ignore(
                    saga->saga_id,
                    "the reply answers event " + e.correlation_id + ", not this phase's command " + command->second);
            }
        }
        machine::Reply reply;
        reply.step_name = e.step_name;
        reply.phase = *phase;
        reply.attempt = current != nullptr ? current->attempt : 1;  // every attempt carries the same command
        reply.outcome = outcome;
        reply.data = e.data;
        const auto decision = machine::Decide(*definition, saga->state, reply);
        if (!decision.ignored.empty()) return ignore(saga->saga_id, decision.ignored);
        const auto effects =
            PersistLocked(tx,
                          *definition,
                          *saga,
                          decision,
                          side,
                          {{"reply", e.step_name, e.phase, reply.attempt, e.id, {{"outcome", outcome_text}}}},
                          &writes);
        ++side.replies_applied;
        side.Poke(effects.next_timer);
    }

    // --- durable timers ----------------------------------------------------------------------------
    // detail::TimerLoop wakes ScanBlocking at the next due time, one scan at a time, on the pool.

    void Poke(std::optional<std::chrono::milliseconds> delay) {
        // Called after the commit that set the timer (Apply, Committed, ...): the scan sees it.
        if (delay) timers_.Poke(*delay);
    }

    // Fires every due timer, each in a transaction of its own under the saga's row lock (skipping a
    // saga another engine is working on: its timer stays due and is seen by the next scan). Returns
    // the time until the next one.
    std::chrono::milliseconds ScanBlocking(pqxx::connection& conn) {
        try {
            for (;;) {
                std::vector<detail::DueTimer> due;
                {
                    pqxx::read_transaction tx{conn};
                    due = detail::DueTimers(tx, 100);
                }
                int fired = 0;
                for (const auto& timer : due) fired += FireTimer(conn, timer) ? 1 : 0;
                if (due.size() < 100 || fired == 0) break;
            }
            pqxx::read_transaction tx{conn};
            return detail::NextTimer(tx).value_or(config_.timer_max_sleep);
        } catch (const pqxx::broken_connection&) {
            throw;  // the timer loop logs it; the pool reconnects for the next scan
        } catch (const std::exception& e) {
            if (const auto unlogged = timer_failures_.Due()) {
                spdlog::warn("engine {}: timer scan failed, retrying every {} ms: {}{}",
                             config_.instance_id,
                             config_.timer_max_sleep.count(),
                             store::ExplainDatabaseError(e),
                             *unlogged == 0 ? "" : fmt::format(" ({} failures since the last line)", *unlogged));
            }
            return config_.timer_max_sleep;
        }
    }

    bool FireTimer(pqxx::connection& conn, const detail::DueTimer& timer) {
        pqxx::work tx{conn};
        auto saga = detail::LockSaga(tx, timer.saga_id, LockMode::kSkipLocked);
        if (!saga) return false;
        const auto definition = Definition(tx, saga->saga_type, saga->definition_hash);
        if (timer.saga_deadline) return FireDeadline(tx, *definition, *saga);
        if (!timer.retry && HoldTimeout(tx, *definition, *saga, timer)) {
            tx.commit();
            return true;
        }
        machine::Event event = machine::Timeout{timer.step_name, timer.phase, timer.attempt};
        if (timer.retry) event = machine::RetryDue{timer.step_name, timer.phase, timer.attempt + 1};
        const auto decision = machine::Decide(*definition, saga->state, event);
        if (!decision.ignored.empty()) return false;  // another engine fired it first
        std::vector<detail::TimelineRow> timeline;
        if (!timer.retry) {
            timeline.push_back(
                {"timeout", timer.step_name, std::string(machine::ToString(timer.phase)), timer.attempt, {}, {}});
        }
        SideEffects side;
        PersistLocked(tx, *definition, *saga, decision, side, std::move(timeline));
        tx.commit();
        Apply(std::move(side));
        ++counters_.timers_fired;
        return true;
    }

    std::string ParticipantGroup(const std::string& participant) const {
        const auto it = config_.participant_groups.find(participant);
        return it != config_.participant_groups.end() ? it->second : "sagaflow-participant-" + participant;
    }

    // The two clocks of a step timeout. An attempt's `timeout` counts only time its participant
    // could have used: from when the participant's consumer group read the command (the relay
    // recorded its partition and offset; the group's committed offsets say whether it is past
    // it), and only once the engine's own group has read every reply written before the deadline
    // (so a reply waiting in an unassigned or lagging partition is read, not timed out). While the
    // command waits to be read the attempt waits too, up to the step's startTimeout from its
    // dispatch; past that, or when Kafka cannot say (a group that commits nothing on the topic),
    // the timeout fires as before. Returns true when the timer was moved (the caller commits).
    bool HoldTimeout(pqxx::work& tx,
                     const SagaDefinition& definition,
                     const LoadedSaga& saga,
                     const detail::DueTimer& timer) {
        if (!progress_) return false;
        const StepDefinition* step = definition.FindStep(timer.step_name);
        if (step == nullptr) return false;
        const std::string phase(machine::ToString(timer.phase));
        const auto rows = store::Exec(
            tx,
            "SELECT (extract(epoch FROM clock_timestamp() - coalesce(s.waiting_since, s.deadline_at - $4 * interval "
            "'1 millisecond')) * 1000)::bigint, "
            "(extract(epoch FROM clock_timestamp() - coalesce(s.timeout_due_at, s.deadline_at)) * 1000)::bigint, "
            "s.waiting_since IS NOT NULL, o.published_at IS NOT NULL, o.topic, o.kafka_partition, o.kafka_offset, "
            "(extract(epoch FROM clock_timestamp() - o.published_at) * 1000)::bigint "
            "FROM saga_step s LEFT JOIN outbox o ON o.event_id = s.command_event_id "
            "WHERE s.saga_id = $1::uuid AND s.step_name = $2 AND s.phase = $3 AND s.status = 'dispatched' "
            "AND s.attempt = $5",
            saga.saga_id,
            timer.step_name,
            phase,
            step->timeout.count(),
            timer.attempt);
        if (rows.empty()) return false;
        const auto& row = rows[0];
        const std::chrono::milliseconds since_dispatch{row[0].as<std::int64_t>()};
        const std::chrono::milliseconds overdue{row[1].as<std::int64_t>()};
        const bool waiting = row[2].as<bool>();
        if (since_dispatch >= step->StartTimeout()) return false;  // waited long enough: time out
        const std::string group = ParticipantGroup(step->participant);
        // Moves the timer `delay` ahead. kWaitForRead: the command is unread (waiting_since: the
        // attempt's dispatch, set once); kWaitForReplies: replies unread, or the follower has not looked
        // yet (timeout_due_at: the
        // deadline they must have been read up to, set once); kRestart: read late, the timeout
        // counts anew from the read (both cleared).
        enum class Hold { kWaitForRead = 0, kWaitForReplies = 1, kRestart = 2 };
        const auto move = [&](std::chrono::milliseconds delay, Hold hold) {
            store::Exec(tx,
                        "UPDATE saga_step SET deadline_at = clock_timestamp() + $4 * interval '1 millisecond', "
                        "waiting_since = CASE $6::int WHEN 0 THEN coalesce(waiting_since, deadline_at - $5 * "
                        "interval '1 millisecond') WHEN 1 THEN waiting_since END, "
                        "timeout_due_at = CASE $6::int WHEN 1 THEN coalesce(timeout_due_at, deadline_at) END "
                        "WHERE saga_id = $1::uuid AND step_name = $2 AND phase = $3",
                        saga.saga_id,
                        timer.step_name,
                        phase,
                        delay.count(),
                        step->timeout.count(),
                        static_cast<int>(hold));
        };
        // Clock 1: has the participant read the command?
        std::string unread;
        std::optional<std::chrono::milliseconds> read_ago;
        bool not_looked_yet = false;  // a follower that just started: ask again shortly
        if (!row[3].as<bool>()) {
            unread = "its command is not published yet";
        } else if (!row[5].is_null()) {
            const std::string topic = row[4].as<std::string>();
            progress_->Follow(group, topic);  // a definition registered after Start: followed from now on
            const auto answer = progress_->CommandRead(group, topic, row[5].as<int>(), row[6].as<std::int64_t>());
            if (answer.read == outbox::GroupProgress::Read::kNo) {
                unread = "its command waits to be read by consumer group " + group;
            } else if (answer.read == outbox::GroupProgress::Read::kYes) {
                read_ago = answer.ago;
            } else if (answer.read == outbox::GroupProgress::Read::kNotYet) {
                not_looked_yet = true;
            } else if (const auto unlogged = unknown_progress_.Due()) {
                spdlog::warn("engine {}: step timeouts of participant {} count from dispatch: {}{}",
                             config_.instance_id,
                             step->participant,
                             answer.why,
                             *unlogged == 0 ? "" : fmt::format(" ({} more since the last line)", *unlogged));
            }
        }
        if (not_looked_yet) {
            move(std::chrono::milliseconds(500), Hold::kWaitForReplies);
            return true;
        }
        if (!unread.empty()) {
            constexpr std::chrono::milliseconds kLookAgain{1000};
            move(kLookAgain, Hold::kWaitForRead);
            if (!waiting) {
                detail::RecordEvents(tx,
                                     saga.saga_id,
                                     {{"waiting-for-participant",
                                       timer.step_name,
                                       phase,
                                       timer.attempt,
                                       {},
                                       {{"reason", unread}, {"startTimeoutMs", step->StartTimeout().count()}}}});
            }
            return true;
        }
        if (waiting) {
            // Read at last: the timeout counts from then.
            const auto ago = read_ago.value_or(std::chrono::milliseconds(0));
            const auto rest = std::max(step->timeout - ago, std::chrono::milliseconds(0));
            move(rest, Hold::kRestart);
            detail::RecordEvents(
                tx,
                saga.saga_id,
                {{"started", timer.step_name, phase, timer.attempt, {}, {{"readMsAgo", ago.count()}}}});
            if (rest.count() > 0) return true;
        } else if (read_ago && *read_ago < step->timeout) {
            move(step->timeout - *read_ago, Hold::kRestart);  // read late: its full timeout from the read
            return true;
        }
        // Clock 2: every reply written before the deadline read by this engine's group?
        // Bounded by startTimeout from the command's publication, which moving the timer leaves be;
        // when Kafka cannot say (nullopt) the timeout fires as before.
        const auto caught_up = progress_->CaughtUpAgo(config_.consumer_group, config_.replies_topic);
        const bool can_wait =
            !row[7].is_null() && std::chrono::milliseconds(row[7].as<std::int64_t>()) < step->StartTimeout();
        if (can_wait && caught_up && *caught_up > overdue) {
            move(std::chrono::milliseconds(500), Hold::kWaitForReplies);
            return true;
        }
        return false;
    }

    // The saga's own deadline passed while it runs: cancelled if it is still before its point of no
    // return; otherwise the deadline no longer applies and is cleared. Either way the timeline says so.
    bool FireDeadline(pqxx::work& tx, const SagaDefinition& definition, const LoadedSaga& saga) {
        const std::string reason = "its deadline of " + detail::FormatDuration(*definition.deadline) + " passed";
        const auto cancellation = CancelLocked(tx, definition, saga, reason);
        if (!cancellation.refused.empty()) {
            store::Exec(tx, "UPDATE saga_instance SET deadline_at = NULL WHERE saga_id = $1::uuid", saga.saga_id);
            detail::RecordEvents(
                tx, saga.saga_id, {{"deadline-passed", {}, {}, 0, {}, {{"ignored", cancellation.refused}}}});
        }
        tx.commit();
        if (cancellation.refused.empty()) {
            Apply(std::move(cancellation.side));
            Cancelled(saga.saga_id, reason);
        }
        return true;
    }

    EngineConfig config_;
    bool named_instance_ = false;  // instance_id was given (not the hostname-pid default)
    Engine& owner_;
    std::string source_;
    store::FailureLogLimit timer_failures_;    // the timer scan's, while the database is away
    store::FailureLogLimit unknown_progress_;  // groups whose progress Kafka cannot tell
    std::optional<PruneOptions> prune_;        // EngineConfig::history_retention, validated
    Counters counters_;

    mutable std::shared_mutex definitions_mutex_;
    std::map<std::string, std::shared_ptr<const SagaDefinition>> by_hash_;
    std::map<std::string, std::string> sources_;                           // hash -> YAML
    std::map<std::string, std::shared_ptr<const SagaDefinition>> latest_;  // type -> highest version

    mutable std::mutex latency_mutex_;
    std::map<std::string, StepLatency> latency_;

    std::mutex rng_mutex_;
    std::mt19937_64 rng_{std::random_device{}()};

    detail::Runtime parts_;                            // pool, relay, reply consumer
    std::unique_ptr<outbox::GroupProgress> progress_;  // the groups' committed offsets (HoldTimeout)
    SideEffects reply_effects_;  // the reply batch's, until its commit (consumer hooks; one batch at a time)

    asio::io_context io_;
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
    std::thread io_thread_;
    // After io_: destroyed before it. Poked from the consumer's threads, so it lives as long as this.
    detail::TimerLoop timers_{
        io_, config_.timer_max_sleep, [this](pqxx::connection& conn) { return ScanBlocking(conn); }};
    std::unique_ptr<detail::HttpServer> http_;  // after io_: destroyed before it
    std::atomic<bool> started_{false};
};

Engine::Engine(EngineConfig config) : impl_(std::make_unique<Impl>(std::move(config), *this)) {}
Engine::~Engine() = default;

std::string Engine::RegisterDefinitionFile(const std::filesystem::path& path) {
    auto loaded = LoadDefinitionFile(path);
    std::string source;
    if (loaded.definition) {
        std::ifstream in(path, std::ios::binary);
        source.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return impl_->Register(std::move(loaded), std::move(source));
}

std::string Engine::RegisterDefinition(std::string_view yaml, std::string_view source_name) {
    return impl_->Register(LoadDefinitionString(yaml, source_name), std::string(yaml));
}

void Engine::Start() {
    impl_->Start();
}

void Engine::Stop() {
    impl_->Stop();
}

StartResult Engine::StartSaga(const std::string& saga_type,
                              nlohmann::json input,
                              const std::string& idempotency_key,
                              const TraceContext& trace) {
    return impl_->StartSaga(saga_type, std::move(input), idempotency_key, trace);
}

std::optional<SagaView> Engine::GetSaga(const std::string& saga_id) {
    return impl_->GetSaga(saga_id);
}

EngineMetrics Engine::Metrics() const {
    return impl_->Metrics();
}

SagaPage Engine::ListSagas(const ListQuery& query) {
    return impl_->ListSagas(query);
}

RetryResult Engine::RetrySaga(const std::string& saga_id) {
    return impl_->RetrySaga(saga_id);
}

std::optional<std::string> Engine::SagaGraph(const std::string& saga_id, GraphFormat format) {
    return impl_->SagaGraph(saga_id, format);
}

CancelResult Engine::CancelSaga(const std::string& saga_id, const std::string& reason) {
    return impl_->CancelSaga(saga_id, reason);
}

EngineGauges Engine::ReadGauges() {
    return impl_->ReadGauges();
}

int Engine::HttpPort() const noexcept {
    return impl_->HttpPort();
}

namespace detail {

std::optional<SagaView> ReadSagaView(pqxx::transaction_base& tx, const std::string& saga_id) {
    const auto rows = tx.exec_params(
        "SELECT saga_type, definition_version, definition_hash, status, coalesce(parked_reason, ''), "
        "input::text, data::text, coalesce(idempotency_key, ''), coalesce(traceparent, ''), "
        "coalesce(tracestate, ''), " +
            Rfc3339("created_at") + ", " + Rfc3339("updated_at") + ", " +
            Rfc3339("CASE WHEN status = 'running' THEN deadline_at END") +
            " FROM saga_instance WHERE saga_id = $1::uuid",
        saga_id);
    if (rows.empty()) return std::nullopt;
    SagaView view;
    const auto& r = rows[0];
    view.saga_id = saga_id;
    view.saga_type = Text(r[0]);
    view.definition_version = r[1].as<int>();
    view.definition_hash = Text(r[2]);
    view.status = Text(r[3]);
    view.parked_reason = Text(r[4]);
    view.input = Json(r[5]);
    view.data = Json(r[6]);
    view.idempotency_key = Text(r[7]);
    view.trace = {Text(r[8]), Text(r[9])};
    view.created_at = Text(r[10]);
    view.updated_at = Text(r[11]);
    view.deadline_at = Text(r[12]);
    for (const auto& s : tx.exec_params("SELECT step_name, phase, status, attempt, command_event_id::text, "
                                        "reply::text, " +
                                            Rfc3339("dispatched_at") + ", " + Rfc3339("completed_at") + ", " +
                                            Rfc3339("next_attempt_at") + ", " + Rfc3339("deadline_at") +
                                            " FROM saga_step WHERE saga_id = $1::uuid ORDER BY dispatched_at, "
                                            "phase",
                                        saga_id)) {
        view.steps.push_back({Text(s[0]),
                              Text(s[1]),
                              Text(s[2]),
                              s[3].as<int>(),
                              Text(s[4]),
                              Json(s[5]),
                              Text(s[6]),
                              Text(s[7]),
                              Text(s[8]),
                              Text(s[9])});
    }
    for (const auto& e : tx.exec_params("SELECT " + Rfc3339("at") +
                                            ", kind, coalesce(step_name, ''), coalesce(phase, ''), "
                                            "coalesce(attempt, 0), coalesce(event_id::text, ''), detail::text "
                                            "FROM saga_event WHERE saga_id = $1::uuid ORDER BY id",
                                        saga_id)) {
        view.timeline.push_back(
            {Text(e[0]), Text(e[1]), Text(e[2]), Text(e[3]), e[4].as<int>(), Text(e[5]), Json(e[6])});
    }
    return view;
}

SagaDefinition ReadStoredDefinition(pqxx::transaction_base& tx, const std::string& type, const std::string& hash) {
    const auto rows =
        tx.exec_params("SELECT source FROM saga_definition WHERE saga_type = $1 AND hash = $2", type, hash);
    if (rows.empty()) throw std::runtime_error("saga definition " + type + "@" + hash + " is not in the database");
    auto loaded = LoadDefinitionString(rows[0][0].as<std::string>(), type + "@" + hash.substr(0, 12));
    if (!loaded.definition || loaded.definition->hash != hash) {
        throw std::runtime_error("the stored source of saga definition " + type + "@" + hash +
                                 " does not load back to the same definition");
    }
    return std::move(*loaded.definition);
}

GraphOverlay OverlayOf(const SagaView& saga) {
    GraphOverlay overlay;
    overlay.title = "saga " + saga.saga_id + ": " + saga.status;
    overlay.saga_status = saga.status;
    for (const auto& step : saga.steps) overlay.phases[{step.step_name, step.phase}] = step.status;
    return overlay;
}

StartResult EngineInternals::StartIn(Engine& engine,
                                     pqxx::work& tx,
                                     const SagaDefinition& definition,
                                     const std::string& saga_type,
                                     const nlohmann::json& input,
                                     const std::string& idempotency_key,
                                     const TraceContext& trace,
                                     PendingStart& pending) {
    return engine.impl_->StartWith(tx, definition, saga_type, input, idempotency_key, trace, pending);
}

void EngineInternals::Committed(Engine& engine, const StartResult& result, const PendingStart& pending) {
    engine.impl_->Committed(result, pending);
}

store::ConnectionPool& EngineInternals::Pool(Engine& engine) {
    return engine.impl_->Pool();
}

std::optional<StartResult> EngineInternals::Refusal(Engine& engine,
                                                    const std::string& saga_type,
                                                    nlohmann::json& input,
                                                    std::shared_ptr<const SagaDefinition>& definition) {
    return engine.impl_->Refusal(saga_type, input, definition);
}

bool EngineInternals::KnowsType(Engine& engine, const std::string& saga_type) {
    return engine.impl_->KnowsType(saga_type);
}

}  // namespace detail

const EngineConfig& Engine::Config() const noexcept {
    return impl_->Config();
}

}  // namespace sagaflow
