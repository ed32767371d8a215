#pragma once
// The embedding API: everything a service needs to run sagas in-process. Free of libpqxx and
// librdkafka types (pimpl), so an embedding service does not inherit their headers.
//
//     sagaflow::EngineConfig config;
//     config.database_url = "postgresql://app@db/app";
//     config.kafka_brokers = "kafka:9092";
//     sagaflow::Engine engine{config};
//     engine.RegisterDefinitionFile("sagas/order-payment.yaml");
//     engine.Start();  // migrations, relay, reply consumer, timers; resumes unfinished sagas
//     auto started = engine.StartSaga("order-payment", input, "client-key-42");
//     auto saga = engine.GetSaga(started.saga_id);
//     engine.Stop();
//
// Lifecycle and threads: the constructor only checks the config. Start() runs the migrations,
// writes the registered definitions, creates the topics, then starts (in this order) the database
// pool, the outbox relay thread, the reply consumer thread and one io thread for the timers; Stop()
// stops them in reverse order. StartSaga/GetSaga block on the database (they are for request
// handlers that run on their own threads, not for an io thread) and may be called from any thread
// between Start and Stop.
//
// Guarantees: each (saga, step, phase) is dispatched at most once, with one command event id that
// every resend reuses; a reply changes the saga, records its id in the inbox and enqueues the next
// command in one transaction; timers live in the database and survive restarts; several engines on
// one database and one consumer group share the sagas (row locks) and take over each other's work.

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/definition.hpp"
#include "core/definition_graph.hpp"
#include "core/saga_machine.hpp"

namespace sagaflow {

// The HTTP API (`sagaflow run` turns it on). See engine/README.md for the endpoints.
struct HttpConfig {
    bool enabled = false;
    std::string address = "127.0.0.1";
    int port = 8080;         // 0: any free port (Engine::HttpPort() tells which)
    int worker_threads = 4;  // run the blocking database calls of requests, off the io thread
    int max_connections = 256;
    std::size_t max_body_bytes = 1 << 20;
    std::size_t max_header_bytes = 16 << 10;
    int max_json_depth = 64;                 // arrays and objects nested in a body; deeper is refused with 400
    std::chrono::seconds io_timeout{30};     // a slow client is cut off after this
    std::chrono::hours idempotency_ttl{48};  // 24..72 h (rule R-DIST-IDEM-5)
    // Bearer tokens -> client name. Empty: no authentication. A client whose name starts with
    // "operator" may also list sagas and retry parked ones; others get 403 there.
    std::map<std::string, std::string> tokens;
    // Without tokens the API serves anyone who can reach it: allowed on a loopback address only,
    // unless this is set (then logged as a warning at start). Operator endpoints (list, retry,
    // cancel) still need a token on a non-loopback address.
    bool allow_unauthenticated = false;
};

struct EngineConfig {
    std::string database_url;  // postgresql://user@host:port/db; the password may come from PGPASSWORD
    std::string kafka_brokers;
    std::map<std::string, std::string> kafka_properties;  // librdkafka properties (TLS, SASL, ...)
    // Extra librdkafka properties of the reply consumer only (session.timeout.ms, ...).
    std::map<std::string, std::string> consumer_properties;
    // Replies whose JSON nests arrays and objects deeper are dead-lettered unread (docs/protocol.md).
    int max_json_depth = 64;
    // Static group membership (KIP-345): the reply consumer joins under a stable id — `instance_id`
    // when it is set, else "<hostname>-<slot>" (outbox/membership.hpp) — so a restarted engine gets
    // its partitions back at once instead of after a rebalance. False: a dynamic member.
    bool static_membership = true;
    std::string replies_topic = "sagaflow.replies";
    std::string consumer_group = "sagaflow-engine";
    // The consumer group of each participant (definitions' `participant:`) whose commands the step
    // timeouts wait for (engine/README.md, "Two clocks"). Unlisted: "sagaflow-participant-<name>",
    // the participant API's default.
    std::map<std::string, std::string> participant_groups;
    // Names this engine in events' `source` and, if set, is its group.instance.id: set it to
    // something stable per replica and unique in the group (a StatefulSet's pod name). Default:
    // hostname-pid as the source, a derived id for the group.
    std::string instance_id;
    int database_pool_size = 4;
    int topic_partitions = 6;  // for topics the engine creates (replies, commands)
    bool create_topics = true;
    bool run_migrations = true;
    // Which parts run here. An engine with process_sagas = false only starts and reads sagas (an
    // API front end); the relay may run anywhere, one leader at a time per database.
    bool process_sagas = true;
    bool run_relay = true;
    std::chrono::milliseconds timer_max_sleep{1000};  // the timers re-read the database at least this often
    // Saga history retention: finished sagas (completed, compensated) whose last change is older
    // than this are deleted with their steps and timeline by the daily sweep of an engine that
    // processes sagas (engine/repository/retention.hpp; at least 72 h). Unset: kept until `sagaflow prune`.
    std::optional<std::chrono::hours> history_retention;
    HttpConfig http;
};

// A saga's status and a step's phase (core/saga_machine.hpp); their text forms (`ToString`,
// `Parse...`) are what the HTTP API, the database and `sagaflow show` use.
using SagaStatus = machine::SagaStatus;
using StepPhase = machine::Phase;
using StepPhaseStatus = machine::StepPhaseStatus;

struct StepPhaseRecord {
    std::string step_name;
    StepPhase phase = StepPhase::kAction;
    StepPhaseStatus status = StepPhaseStatus::kDispatched;  // timed_out, cancelled: the outcome is unknown
    int attempt = 1;
    std::string command_event_id;
    nlohmann::json reply;                                                   // null until answered
    std::string dispatched_at, completed_at, next_attempt_at, deadline_at;  // RFC 3339, empty if unset
};

// The W3C Trace Context of whoever starts a saga (an HTTP request's `traceparent`/`tracestate`
// headers). Every command of the saga, and every participant's reply, carries it unchanged as the
// CloudEvents distributed-tracing extension attributes `traceparent` and `tracestate`, so a tracer
// can join all the services' work to the starter's trace. An invalid traceparent is dropped (the
// specification's rule for a receiver), and its tracestate with it.
struct TraceContext {
    std::string traceparent;  // "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>"
    std::string tracestate;   // vendor entries, up to 512 printable characters
};

struct TimelineEntry {
    std::string at;  // RFC 3339
    // started | dispatched | waiting-for-participant | started | resent | reply | timeout |
    // retry-scheduled | cancelled | deadline-passed | operator-retry | finished | ignored
    std::string kind;
    std::string step_name;           // empty: not about a step
    std::optional<StepPhase> phase;  // with step_name
    int attempt = 0;
    std::string event_id;
    nlohmann::json detail;
};

struct SagaView {
    std::string saga_id;
    std::string saga_type;
    int definition_version = 0;
    std::string definition_hash;
    SagaStatus status = SagaStatus::kRunning;
    std::string parked_reason;
    nlohmann::json input;
    nlohmann::json data;
    std::string idempotency_key;
    TraceContext trace;  // as the saga was started with (empty: none)
    std::string created_at, updated_at;
    std::string deadline_at;  // RFC 3339: the definition's deadline, while it can still cancel; else empty
    std::vector<StepPhaseRecord> steps;
    std::vector<TimelineEntry> timeline;

    bool Terminal() const {
        return status == SagaStatus::kCompleted || status == SagaStatus::kCompensated || status == SagaStatus::kFailed;
    }
};

// The answer of StartSaga. Expected outcomes are values: only a broken database throws (a
// std::exception; `store::IsTransientDatabaseError(e)` from store/errors.hpp tells an outage —
// out of disk, restarting, read-only, connection lost — that a retry with the same key survives:
// it starts the saga, or replays the one a lost connection left started). A connection lost during
// the start is settled inside: the start runs again on a new connection and starts the saga once.
struct StartResult {
    enum class Status {
        kStarted,       // a new saga, `saga_id`
        kReplayed,      // the key was used before with the same input: that saga's id
        kConflict,      // the key was used before with other input (`saga_id` is that saga)
        kInvalidInput,  // `errors` says which fields
        kUnknownType,   // no definition of that saga type is registered
    };
    Status status = Status::kStarted;
    std::string saga_id;
    std::vector<InputError> errors;
    std::string message;  // for the non-started outcomes: what happened and what to do

    bool Accepted() const { return status == Status::kStarted || status == Status::kReplayed; }
};

struct SagaSummary {
    std::string saga_id, saga_type;
    SagaStatus status = SagaStatus::kRunning;
    std::string created_at, updated_at;
    std::string idempotency_key;  // empty: started without one
};

// Filters of the saga listing; each narrows a walk of the saga id index (UUID v7 ids sort by
// creation), so a page costs about the same with millions of sagas.
struct ListQuery {
    std::optional<SagaStatus> status;  // nullopt: any
    std::string saga_type;             // empty: any
    std::string idempotency_key;       // exact; empty: any
    // The key also matches as "<scope>:<key>" for each scope given: the HTTP API stores a client's
    // key so when tokens are configured, and lists its clients here.
    std::vector<std::string> key_scopes;
    std::string id_prefix;  // the id's first hex digits (hyphens ignored); empty: any
    // Age from the time in the saga's UUID v7 id (when the engine minted it at the start).
    std::optional<std::chrono::seconds> min_age, max_age;
    std::string cursor;  // the next_cursor of the previous page; empty: the newest sagas
    int limit = 50;      // 1..500
};

// How many sagas there are in each status (`estimated`: counted from the planner's statistics, for
// the finished statuses of a large table), the oldest open saga and the outbox's backlog: the
// console's overview.
struct SagaOverview {
    std::map<std::string, long long> counts;             // status -> sagas
    bool estimated = false;                              // completed and compensated are estimates
    std::vector<std::string> saga_types;                 // every registered type, sorted
    std::string oldest_open_id, oldest_open_created_at;  // empty: no saga is open
    double oldest_open_seconds = 0;
    long long outbox_backlog = 0;
    double oldest_unpublished_seconds = 0;
};

struct SagaPage {
    std::vector<SagaSummary> items;  // newest first
    std::string next_cursor;         // empty on the last page
};

struct RetryResult {
    enum class Status { kResumed, kNotFound, kNotParked };
    Status status = Status::kResumed;
    std::string message;
};

struct CancelResult {
    enum class Status { kCancelled, kAlreadyCompensating, kNotFound, kNotCancellable };
    Status status = Status::kCancelled;
    std::optional<SagaStatus> saga_status;  // the saga's status after the call (nullopt if not found)
    std::string message;
};

// What the database says now (for /metrics).
struct EngineGauges {
    std::map<std::pair<std::string, std::string>, long long> sagas;  // (type, status) -> count
    long long outbox_backlog = 0;
    double oldest_unpublished_seconds = 0;
};

// Step latency (dispatch to answer) per step name, cumulative Prometheus buckets in seconds.
struct StepLatency {
    static constexpr std::array<double, 10> kBuckets{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30};
    std::array<std::uint64_t, kBuckets.size()> counts{};  // cumulative: <= bucket
    std::uint64_t count = 0;
    double sum = 0;
};

struct EngineMetrics {
    std::uint64_t sagas_started = 0;
    std::uint64_t replies_applied = 0;
    std::uint64_t replies_ignored = 0;
    std::uint64_t timers_fired = 0;
    std::uint64_t sagas_finished = 0;
    std::uint64_t sagas_parked = 0;
    std::uint64_t sagas_cancelled = 0;   // by CancelSaga, in this engine
    std::uint64_t reply_duplicates = 0;  // dropped by the inbox
    std::uint64_t outbox_published = 0;
    std::uint64_t relay_errors = 0;       // produce failures retried, batches left unmarked
    std::uint64_t consumer_restarts = 0;  // reply consumers replaced after a fatal Kafka error
    std::uint64_t database_stalls = 0;    // reply batches put back: the database could not take them
    std::map<std::string, StepLatency> step_latency;
};

// Thrown by Start() and the Register* functions for configuration and startup errors; the message
// names the cause and a hint.
class EngineError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

class Engine {
  public:
    explicit Engine(EngineConfig config);
    ~Engine();  // Stop()
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Registers a definition (DefinitionError with every diagnostic if it is invalid) and returns its
    // hash. New sagas of its type use the highest registered version; running sagas stay on theirs.
    // Registering another content under a version already in the database is refused.
    std::string RegisterDefinitionFile(const std::filesystem::path& path);
    std::string RegisterDefinition(std::string_view yaml, std::string_view source_name);

    void Start();
    void Stop();

    // Starts a saga, or finds the one the idempotency key started (empty key: always a new saga).
    // `trace`: the caller's trace context, carried by every command of the saga (TraceContext).
    StartResult StartSaga(const std::string& saga_type,
                          nlohmann::json input,
                          const std::string& idempotency_key,
                          const TraceContext& trace = {});

    // The saga's state, its step phases and its timeline; nullopt if there is no such saga.
    std::optional<SagaView> GetSaga(const std::string& saga_id);

    // The saga drawn over its definition's graph, each step phase coloured by its status (GET
    // /v1/sagas/{id}/graph, `sagaflow show --format mermaid|dot`); nullopt if there is no such saga.
    std::optional<std::string> SagaGraph(const std::string& saga_id, GraphFormat format);

    // Pages through sagas, newest first (operators; GET /v1/sagas).
    SagaPage ListSagas(const ListQuery& query);
    // Resumes a saga parked as `failed`: the phase that gave up gets one more attempt, now, with
    // the same command event id (operators; POST /v1/sagas/{id}/retry).
    RetryResult RetrySaga(const std::string& saga_id);
    // Calls off a saga before its point of no return: the step in flight is compensated (it may
    // have taken effect; a participant turns a compensation that overtakes its action into a null
    // compensation and refuses the action), then the completed steps, newest first; the saga ends
    // `compensated`. Refused (kNotCancellable, saying why) once a pivot or retriable step has been
    // reached, or after the end; a saga already compensating or compensated — a repeated cancel —
    // answers kAlreadyCompensating. `reason` goes into the timeline (POST /v1/sagas/{id}/cancel).
    CancelResult CancelSaga(const std::string& saga_id, const std::string& reason);

    EngineMetrics Metrics() const;
    EngineGauges ReadGauges();
    const EngineConfig& Config() const noexcept;
    // The HTTP API's port once started (useful with HttpConfig::port = 0); 0 when it is off.
    int HttpPort() const noexcept;

  private:
    class Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sagaflow
