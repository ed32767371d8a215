#pragma once
// The participant API: a service that executes saga steps. Free of libpqxx and librdkafka types.
//
//     sagaflow::ParticipantConfig config;
//     config.name = "payment";                  // reads "payment.commands"
//     config.database_url = "postgresql://payment@db/shop";
//     config.schema = "payment";                // its own tables, outbox and inbox live here
//     config.kafka_brokers = "kafka:9092";
//     sagaflow::Participant participant{config};
//     participant.OnAction("ChargePayment.v1", [](sagaflow::Transaction& tx, const sagaflow::Command& c) {
//         tx.Execute("INSERT INTO payment ...", {...});
//         return sagaflow::StepReply::Success({{"paymentId", id}});
//     });
//     participant.OnCompensation("RefundPayment.v1", ...);
//     participant.Start();
//
// Guarantees: a handler runs inside the participant's database transaction together with the inbox
// record (processed_event), the step record (participant_step, keyed by sagaId + stepName + phase)
// and the reply's outbox row: effect, dedup and reply commit as one or not at all. A repeated
// command (a redelivery, or the engine's resend after a timeout) does not run the handler again: the
// stored reply is sent again, with its original event id. A compensation for an action this
// participant never applied is recorded as done without calling the handler ("null compensation"),
// and an action arriving after its compensation is refused ("anti-hanging"), so a slow action never
// lands after its undo.
//
// Threads: Start() runs the migrations (in `schema`), the Setup functions, then starts a database
// pool, the outbox relay and the command consumer. Handlers run on the consumer thread, one at a
// time, and must not block on anything but the database.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sagaflow {

// The handler's view of its database transaction: parameterised SQL, rows as text.
class Transaction {
  public:
    using Param = std::optional<std::string>;  // nullopt: SQL NULL
    using Row = std::vector<std::optional<std::string>>;

    // Runs `sql` with $1.. bound to `params`; returns the rows.
    std::vector<Row> Query(const std::string& sql, const std::vector<Param>& params = {});
    // Runs `sql`; returns the number of rows it affected.
    std::uint64_t Execute(const std::string& sql, const std::vector<Param>& params = {});

    explicit Transaction(void* native) : native_(native) {}  // internal: the engine's transaction

  private:
    void* native_;
};

struct Command {
    std::string saga_id;
    std::string step_name;
    std::string phase;  // action | compensation
    std::string type;   // e.g. ChargePayment.v1
    std::string event_id;
    nlohmann::json data;
    // The W3C Trace Context the saga was started with (empty: none): hand it to your tracer to join
    // this handler's work to the starter's trace. The reply carries it back unchanged.
    std::string traceparent;
    std::string tracestate;

    // The participant's idempotency key for this step phase: sagaId:stepName:phase.
    std::string IdempotencyKey() const { return saga_id + ":" + step_name + ":" + phase; }
};

struct StepReply {
    enum class Outcome { kSuccess, kFailure, kRetry };
    Outcome outcome = Outcome::kSuccess;
    nlohmann::json data = nlohmann::json::object();

    static StepReply Success(nlohmann::json data = nlohmann::json::object());
    // A definite "no effect" (declined, out of stock): the engine compensates the earlier steps.
    static StepReply Failure(const std::string& reason, nlohmann::json data = nlohmann::json::object());
    // Transient: nothing is stored and the handler's writes are rolled back; the engine resends
    // after its backoff and the handler runs again.
    static StepReply Retry(const std::string& reason);
};

// A handler that throws rolls everything back and stores nothing. Let the database's exceptions
// through (do not answer Failure for them): one that is the environment's fault (out of disk,
// restarting, read-only: store/errors.hpp) makes the consumer wait and run the command again,
// however long that takes; any other is tried a few times, then the command goes to the .dlq topic.
using CommandHandler = std::function<StepReply(Transaction& tx, const Command& command)>;

struct ParticipantConfig {
    std::string name;  // as in the saga definitions' `participant:`; commands come on "<name>.commands"
    std::string database_url;
    std::string schema;  // empty: the URL's default search_path
    std::string kafka_brokers;
    std::map<std::string, std::string> kafka_properties;
    // Extra librdkafka properties of the command consumer only (session.timeout.ms,
    // group.instance.id for static membership, ...).
    std::map<std::string, std::string> consumer_properties;
    // Commands whose JSON nests arrays and objects deeper are dead-lettered unread (docs/protocol.md).
    int max_json_depth = 64;
    std::string replies_topic = "sagaflow.replies";
    std::string consumer_group;  // default: "sagaflow-participant-<name>"
    // Static group membership under a stable id: group.instance.id from consumer_properties, else
    // "<hostname>-<slot>" (outbox/membership.hpp). A restarted replica takes its partitions back at
    // once; the others keep theirs throughout (cooperative rebalancing). False: a dynamic member.
    bool static_membership = true;
    int database_pool_size = 2;
    int topic_partitions = 6;
    bool create_topics = true;
    bool run_migrations = true;
    bool run_relay = true;
    // How long the inbox (`processed_event` in `schema`) remembers a command's event id: a
    // redelivery within it is dropped. 24..72 h (rule R-DIST-IDEM-5); a sweep on Start() and
    // daily deletes older rows.
    std::chrono::hours inbox_ttl{48};
};

struct ParticipantMetrics {
    std::uint64_t applied = 0;             // handlers run and committed
    std::uint64_t replayed = 0;            // repeated commands answered with the stored reply
    std::uint64_t null_compensations = 0;  // compensations of actions never applied
    std::uint64_t refused_late_actions = 0;
    std::uint64_t retries = 0;            // handlers that answered Retry
    std::uint64_t duplicates = 0;         // deliveries the inbox dropped
    std::uint64_t consumer_restarts = 0;  // command consumers replaced after a fatal Kafka error
    std::uint64_t database_stalls = 0;    // command batches put back: the database could not take them
};

// A configuration the participant refuses (no database URL, a bad schema name, an inbox TTL
// outside 24-72 h), with the fix in its message.
class ParticipantError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

class Participant {
  public:
    explicit Participant(ParticipantConfig config);
    ~Participant();  // Stop()
    Participant(const Participant&) = delete;
    Participant& operator=(const Participant&) = delete;

    void OnAction(const std::string& command_type, CommandHandler handler);
    void OnCompensation(const std::string& command_type, CommandHandler handler);
    // Runs in one transaction at Start, after the migrations (e.g. CREATE TABLE IF NOT EXISTS).
    void Setup(std::function<void(Transaction& tx)> setup);

    void Start();
    void Stop();
    ParticipantMetrics Metrics() const;
    // The database URL with the schema applied (for the service's own connections).
    const std::string& DatabaseUrl() const noexcept;

  private:
    class Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sagaflow
