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

#include "core/definition_loader.hpp"
#include "core/detail/yaml_reader.hpp"
#include "engine/http/http_server.hpp"
#include "engine/orchestrator/orchestration.hpp"
#include "engine/orchestrator/replies.hpp"
#include "engine/orchestrator/saga_commands.hpp"
#include "engine/orchestrator/timer_loop.hpp"
#include "engine/orchestrator/timers.hpp"
#include "engine/repository/retention.hpp"
#include "engine/repository/saga_store.hpp"
#include "outbox/admin.hpp"
#include "outbox/consumer.hpp"
#include "outbox/group_progress.hpp"
#include "outbox/relay.hpp"
#include "outbox/runtime.hpp"
#include "outbox/uuid.hpp"
#include "store/errors.hpp"
#include "store/inbox.hpp"
#include "store/migrations.hpp"
#include "store/named_thread.hpp"
#include "store/pool.hpp"
#include "store/prepared.hpp"
#include "store/sweeper.hpp"
#include "store/url.hpp"

namespace sagaflow {
namespace {

namespace asio = boost::asio;

std::string DefaultInstanceId() {
    std::array<char, 256> host{};
    if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
    return std::string(host.data()) + "-" + std::to_string(getpid());
}

}  // namespace

// The facade: lifecycle (Start, Stop), the definitions' registration, and the wiring of the
// orchestrator's services — SagaCommands (start, read, list, retry, cancel; the HTTP API calls it
// too), ReplyHandler (the reply consumer's batches), TimerService (driven by a TimerLoop on the
// io thread) — to the pool, the relay, the consumer and the HTTP server.
class Engine::Impl {
  public:
    Impl(EngineConfig config) : config_(std::move(config)) {
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
                "database_pool_size must be at least 2 (the timers and the daily sweep each hold one "
                "connection while they work)");
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
        sagas_ = std::make_unique<detail::Orchestration>(
            config_, [this](std::chrono::milliseconds delay) { timers_.Poke(delay); });
        commands_ = std::make_unique<detail::SagaCommands>(*sagas_);
        replies_ = std::make_unique<detail::ReplyHandler>(*sagas_);
        timer_service_ = std::make_unique<detail::TimerService>(*sagas_, *commands_);
    }

    ~Impl() { Stop(); }

    // Checked against what is registered, then written to the database (when started), and only
    // then known in memory: a definition the database refuses changes nothing here.
    std::string Register(LoadResult loaded, std::string source) {
        if (!loaded.definition) throw DefinitionError(std::move(loaded.diagnostics));
        auto definition = std::make_shared<const SagaDefinition>(std::move(*loaded.definition));
        auto& registry = sagas_->Definitions();
        registry.RefuseConflict(*definition);
        if (parts_.pool) {
            parts_.pool->RunBlocking([&](pqxx::connection& conn) {
                pqxx::work tx{conn};
                detail::WriteDefinition(tx, *definition, source);
                tx.commit();
            });
        }
        registry.Add(definition, std::move(source));
        if (progress_) Follow(*definition);
        return definition->hash;
    }

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
        // in the database never holds the connections the timers and the daily sweep need (the reply
        // consumer has a connection of its own).
        const int http_connections = config_.http.enabled ? std::max(1, config_.http.worker_threads) : 0;
        parts_.StartPool(config_.database_url, config_.database_pool_size + http_connections);
        sagas_->Attach(parts_.pool.get());
        const auto registered = sagas_->Definitions().All();
        parts_.pool->RunBlocking([&](pqxx::connection& conn) {
            pqxx::work tx{conn};
            for (const auto& [definition, source] : registered) {
                detail::WriteDefinition(tx, *definition, source);
            }
            tx.commit();
        });
        if (config_.create_topics && (config_.process_sagas || config_.run_relay)) {
            std::vector<std::string> topics{config_.replies_topic};
            for (const auto& [definition, source] : registered) {
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
            consumer_options.json_limits.max_depth = config_.max_json_depth;
            if (config_.static_membership && named_instance_) {
                consumer_options.properties.try_emplace("group.instance.id", config_.instance_id);
            }
            // A batch's side effects wait for its commit (and go with its rollback).
            consumer_options.on_transaction_begin = [this] { reply_effects_ = {}; };
            consumer_options.after_commit = [this] { sagas_->Apply(std::exchange(reply_effects_, {})); };
            consumer_options.companion = detail::ReplyHandler::LockAndReadFor;
            parts_.StartConsumer(consumer_options,
                                 [this](pqxx::transaction_base& tx,
                                        const std::vector<const outbox::InboundEvent*>& events,
                                        const pqxx::result* companion) {
                                     return replies_->OnReplies(tx, events, companion, reply_effects_);
                                 });

            // The two clocks of a step timeout (HoldTimeout) read the groups' progress from Kafka.
            progress_ = std::make_unique<outbox::GroupProgress>(config_.kafka_brokers, config_.kafka_properties);
            progress_->Follow(config_.consumer_group, config_.replies_topic, true);
            for (const auto& [definition, source] : registered) Follow(*definition);
            progress_->Start();
            timer_service_->Follow(progress_.get());

            const auto active = parts_.pool->RunBlocking([](pqxx::connection& conn) {
                pqxx::read_transaction tx{conn};
                return detail::CountOpenSagas(tx);
            });
            spdlog::info("engine {}: resuming {} unfinished saga(s) on {}", config_.instance_id, active, redacted);
        }
        if (config_.process_sagas || config_.http.enabled) {
            io_.restart();
            work_.emplace(asio::make_work_guard(io_));
            io_thread_ = store::NamedThread("sf-io", [this] { io_.run(); });
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
            http_ = std::make_unique<detail::HttpServer>(
                io_, *commands_, [this] { return Metrics(); }, config_);
            http_->Start();
        }
    }

    void Stop() {
        started_ = false;
        // Nothing waits for the database from here on: the sweep, the timer scan and a consumer
        // batch waiting for a connection (PostgreSQL down) fail, so the joins below return.
        parts_.BeginStop();
        // Reverse order of Start: http, timers, then (parts_.Stop) sweeper, consumer, relay, pool.
        // The HTTP requests in progress finish on the pool first; then the commands refuse.
        if (http_) http_->Stop();
        sagas_->Attach(nullptr);
        if (io_thread_.joinable()) {
            io_.stop();
            io_thread_.join();
            work_.reset();
        }
        timers_.Stop();  // waits for the scan in flight
        http_.reset();
        timer_service_->Follow(nullptr);
        if (progress_) progress_->Stop();
        parts_.Stop();
    }

    detail::SagaCommands& Commands() { return *commands_; }

    EngineMetrics Metrics() const {
        EngineMetrics m;
        const auto& c = sagas_->Count();
        m.sagas_started = c.sagas_started;
        m.replies_applied = c.replies_applied;
        m.replies_ignored = c.replies_ignored;
        m.timers_fired = c.timers_fired;
        m.sagas_finished = c.sagas_finished;
        m.sagas_parked = c.sagas_parked;
        m.sagas_cancelled = c.sagas_cancelled;
        if (parts_.consumer) {
            m.reply_duplicates = parts_.consumer->Metrics().duplicates;
            m.consumer_restarts = parts_.consumer->Metrics().restarts;
            m.database_stalls = parts_.consumer->Metrics().database_stalls;
        }
        if (parts_.relay) {
            m.outbox_published = parts_.relay->Metrics().published;
            m.relay_errors = parts_.relay->Metrics().retried + parts_.relay->Metrics().failed_batches;
        }
        m.step_latency = sagas_->Latencies();
        return m;
    }

    const EngineConfig& Config() const noexcept { return config_; }
    int HttpPort() const noexcept { return http_ ? http_->Port() : 0; }

  private:
    // The participants' groups on the definition's command topics, for the first clock.
    void Follow(const SagaDefinition& definition) {
        for (const auto& step : definition.steps) {
            progress_->Follow(sagas_->ParticipantGroup(step.participant), step.CommandTopic(), false, step.timeout);
        }
    }

    EngineConfig config_;
    bool named_instance_ = false;        // instance_id was given (not the hostname-pid default)
    std::optional<PruneOptions> prune_;  // EngineConfig::history_retention, validated
    std::unique_ptr<detail::Orchestration> sagas_;
    std::unique_ptr<detail::SagaCommands> commands_;
    std::unique_ptr<detail::ReplyHandler> replies_;
    std::unique_ptr<detail::TimerService> timer_service_;

    outbox::Runtime parts_;                            // pool, relay, reply consumer
    std::unique_ptr<outbox::GroupProgress> progress_;  // the groups' committed offsets (the first clock)
    detail::SideEffects reply_effects_;  // the reply batch's, until its commit (consumer hooks; one batch at a time)

    asio::io_context io_;
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
    std::thread io_thread_;
    // After io_: destroyed before it. Poked from the consumer's threads, so it lives as long as this.
    detail::TimerLoop timers_{
        io_, config_.timer_max_sleep, [this](pqxx::connection& conn, const std::atomic<bool>& running) {
            return timer_service_->Scan(conn, running);
        }};
    std::unique_ptr<detail::HttpServer> http_;  // after io_: destroyed before it
    std::atomic<bool> started_{false};
};

Engine::Engine(EngineConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
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
    return impl_->Commands().Start(saga_type, std::move(input), idempotency_key, trace);
}

std::optional<SagaView> Engine::GetSaga(const std::string& saga_id) {
    const auto id = SagaId::Parse(saga_id);
    return id ? impl_->Commands().Get(*id) : std::nullopt;
}

EngineMetrics Engine::Metrics() const {
    return impl_->Metrics();
}

SagaPage Engine::ListSagas(const ListQuery& query) {
    return impl_->Commands().List(query);
}

RetryResult Engine::RetrySaga(const std::string& saga_id) {
    const auto id = SagaId::Parse(saga_id);
    return id ? impl_->Commands().Retry(*id) : detail::SagaCommands::NoSaga<RetryResult>(saga_id);
}

std::optional<std::string> Engine::SagaGraph(const std::string& saga_id, GraphFormat format) {
    const auto id = SagaId::Parse(saga_id);
    return id ? impl_->Commands().Graph(*id, format) : std::nullopt;
}

CancelResult Engine::CancelSaga(const std::string& saga_id, const std::string& reason) {
    const auto id = SagaId::Parse(saga_id);
    return id ? impl_->Commands().Cancel(*id, reason) : detail::SagaCommands::NoSaga<CancelResult>(saga_id);
}

EngineGauges Engine::ReadGauges() {
    return impl_->Commands().Gauges();
}

int Engine::HttpPort() const noexcept {
    return impl_->HttpPort();
}

const EngineConfig& Engine::Config() const noexcept {
    return impl_->Config();
}

}  // namespace sagaflow
