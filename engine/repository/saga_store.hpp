#pragma once
// Persistence around the pure state machine (internal: uses libpqxx). Every function runs inside
// the caller's transaction; a saga is only read for a change under its row lock (SELECT ... FOR
// UPDATE), so two engines never decide on the same saga at once, and the decision, the step rows,
// the outbox rows of its commands and the timeline entries commit together.

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <pqxx/transaction_base>
#include <random>
#include <string>
#include <vector>

#include "core/definition.hpp"
#include "core/definition_graph.hpp"
#include "core/saga_machine.hpp"
#include "engine/engine.hpp"
#include "store/transaction.hpp"

namespace sagaflow::detail {

struct LoadedSaga {
    std::string saga_id;
    std::string saga_type;
    std::string definition_hash;
    nlohmann::json input;
    std::string traceparent, tracestate;  // the starter's trace context, for every command (may be empty)
    machine::SagaState state;
    std::map<std::pair<std::string, std::string>, std::string> command_ids;  // (step, phase) -> event id
    // (step, phase) -> seconds since the phase's dispatch, at the read: its latency once answered.
    std::map<std::pair<std::string, std::string>, double> dispatch_ages;
};

// One timeline entry (saga_event) to write.
struct TimelineRow {
    std::string kind;
    std::string step_name;
    std::string phase;
    int attempt = 0;
    std::string event_id;
    nlohmann::json detail = nlohmann::json::object();
};

enum class LockMode { kWait, kSkipLocked };

// A saga's lock is a transaction-scoped advisory lock keyed on the low 64 bits of its id (the random
// part of a UUID v7), not a row lock: `SELECT ... FOR UPDATE` wrote a WAL record on the saga's row
// at every lock, four per saga of the sample. Everything that decides on a saga's state takes it
// (replies, timers, operators' commands, retention); an update still locks the row it writes.
// nullopt for an id that is not a UUID.
std::optional<long long> SagaLockKey(const std::string& saga_id);
// The same key in SQL, for a saga_id column.
inline constexpr const char* kSagaLockKeySql = "('x' || right(replace(saga_id::text, '-', ''), 16))::bit(64)::bigint";

// Locks sagas and reads them in one statement (017_lock_and_read_sagas.sql): `$1` the keys of the
// locks, in the order they are taken (key order, so that two engines locking overlapping batches
// cannot deadlock; none: only read), `$2` the sagas' ids. The reply consumer runs it inside its
// inbox statement (ReplyHandler::LockAndReadFor); ReadSagas parses its rows.
inline constexpr const char* kLockAndReadSagasSql =
    "SELECT * FROM sagaflow_lock_and_read_sagas($1::bigint[], $2::uuid[])";
// Its two arguments, to lock and read `saga_ids` (uuids).
std::vector<std::string> LockAndReadArguments(const std::vector<std::string>& saga_ids);
// The sagas of kLockAndReadSagasSql's rows (more columns after its own are ignored), by saga id.
std::map<std::string, LoadedSaga> ReadSagas(const pqxx::result& rows);

// The saga with its step phases, locked; nullopt if there is no such saga (or, with kSkipLocked, if
// another transaction holds it).
std::optional<LoadedSaga> LockSaga(pqxx::transaction_base& tx, const std::string& saga_id, LockMode mode);

// The same for several sagas at once (one statement: kLockAndReadSagasSql; two with kSkipLocked, the
// locks it got, then the read), by saga id; missing ids are not in the map. The ids must be uuids.
std::map<std::string, LoadedSaga> LockSagas(pqxx::transaction_base& tx,
                                            const std::vector<std::string>& saga_ids,
                                            LockMode mode);

// What a persisted decision means for the caller after commit.
struct Effects {
    std::optional<std::chrono::milliseconds> next_timer;  // the earliest deadline or retry it set
    bool finished = false;
    bool parked = false;
    std::vector<std::pair<std::string, double>> step_latencies;  // (step, seconds) of phases answered now
};

// Several sagas' writes, collected and then written with one statement per table (a reply batch:
// step updates, new step + outbox rows, saga rows + timeline — three statements however many
// replies). Flush before a saga it holds is read again, and before the transaction commits.
class Persistence;

class WriteBatch {
  public:
    // Nothing queued to write.
    bool Empty() const noexcept {
        return updates_.empty() && new_steps_.empty() && saga_rows_.empty() && timeline_.empty();
    }
    bool Holds(const std::string& saga_id) const;
    // Queues a timeline entry (saga_id may be empty).
    void Record(const std::string& saga_id, TimelineRow row);
    // Writes everything queued and empties the batch; returns the (step, seconds) latencies of the
    // phases the updates answered.
    std::vector<std::pair<std::string, double>> Flush(pqxx::transaction_base& tx);
    // The same, as the statement to run (nullopt: nothing queued), for a transaction's last write
    // that goes out with its COMMIT (outbox::LastWrite); the latencies come from the read
    // (LoadedSaga::dispatch_ages), not from the statement.
    struct Pending {
        std::optional<store::Statement> statement;
        std::vector<std::pair<std::string, double>> latencies;
    };
    Pending TakeStatement();

    // A saga to start, as one statement: its row with the state Persist queued for it, its
    // timeline, and its first step rows with their outbox rows (the steps only if the saga row went
    // in). Empties the batch. Run it in a transaction, or open one with it (store::Transaction);
    // StartedBy reads its rows: false if the idempotency key was taken, and nothing was written.
    struct NewSaga {
        std::string saga_type;
        int definition_version = 0;
        std::string definition_hash, input;
        std::optional<std::string> idempotency_key;
        std::string traceparent, tracestate;      // empty: none
        std::optional<std::int64_t> deadline_ms;  // the definition's deadline, from now
    };
    store::Statement StartStatement(const NewSaga& saga);
    static bool StartedBy(const pqxx::result& rows) { return rows.at(0)[0].as<int>() == 1; }

  private:
    friend class Persistence;  // Persist's writes
    struct StepUpdate {
        std::string saga_id, step_name, phase, status;
        std::optional<std::string> reply;
        bool open = false, awaiting_retry = false, measure = false;
        double seconds = 0;  // the phase's dispatch age at the read, when `measure`
    };
    struct NewStep {
        std::string saga_id, step_name, phase, timeout_ms;
        std::vector<std::string> outbox;    // event id, topic, key, headers, payload
        std::string status = "dispatched";  // or "skipped": a row without a command
    };
    struct SagaRow {
        std::string saga_id, status, current_step, data;
        std::optional<std::string> parked_reason;
    };
    struct Entry {
        std::string saga_id;
        TimelineRow row;
        bool if_dispatched = false;  // written only if the step row of row.event_id was new
    };
    std::vector<std::string> sagas_;
    std::vector<StepUpdate> updates_;
    std::vector<NewStep> new_steps_;
    std::vector<SagaRow> saga_rows_;
    std::vector<Entry> timeline_;
};

// Persists `decision` (made on `saga.state`): updates the changed step phases, turns its commands
// into step rows, outbox rows (a new event id for a new phase; the same row re-armed for a resend),
// durable timers and timeline entries, and writes the saga row. `timeline` holds the entries of the
// event itself (started, reply, timeout). With `batch`, a decision that only answers phases,
// dispatches new ones and finishes is queued there (its Effects then carry no latencies: Flush
// returns them); one that resends or schedules a retry is written at once. Without a transaction
// (null `tx`; `batch` then required) the decision is only queued, for a statement that opens the
// transaction (a start: a new saga dispatches only new phases); one that would write at once
// throws std::logic_error.
Effects Persist(pqxx::transaction_base* tx,
                const SagaDefinition& definition,
                const LoadedSaga& saga,
                const machine::Decision& decision,
                const std::string& event_source,
                std::mt19937_64& rng,
                std::vector<TimelineRow> timeline = {},
                WriteBatch* batch = nullptr);

// Appends timeline entries with one statement (saga_id may be empty: events for no known saga).
void RecordEvents(pqxx::transaction_base& tx, const std::string& saga_id, const std::vector<TimelineRow>& rows);

// Appends a timeline entry (saga_id may be empty: an event for no known saga).
void RecordEvent(pqxx::transaction_base& tx,
                 const std::string& saga_id,
                 const std::string& kind,
                 const std::string& step_name,
                 const std::string& phase,
                 int attempt,
                 const std::string& event_id,
                 const nlohmann::json& detail);

// A timer that is due: a deadline passed (retry = false) or a backoff elapsed (retry = true).
struct DueTimer {
    std::string saga_id;
    std::string step_name;
    machine::Phase phase = machine::Phase::kAction;
    int attempt = 1;
    bool retry = false;
    bool saga_deadline = false;  // the saga's own deadline (step_name empty)
};

std::vector<DueTimer> DueTimers(pqxx::transaction_base& tx, int limit);

// The operator list's page ($1 status or '', $2 type or '', $3 cursor saga id or '', $4 limit, $5
// highest and $6 lowest saga id or '', $7 the stored idempotency keys to match, joined by chr(31),
// or ''): a backward walk of the primary
// key (or of a status's partial index, or the key's unique index), never a sort of the table.
std::string ListSagasStatement();

// The saga ids a listing's id prefix and ages allow, inclusive ('' where unbounded); nullopt when
// the prefix is not 1..32 hex digits (hyphens ignored). Ages count from the time in a UUID v7 id.
struct IdRange {
    std::string low, high;
};
std::optional<IdRange> ListIdRange(const ListQuery& query, std::chrono::system_clock::time_point now);

// Sagas per status (open ones exact from their partial indexes; finished ones from the planner's
// statistics once the table is large), the registered types, the oldest open saga.
SagaOverview ReadOverview(pqxx::transaction_base& tx);
// The open sagas (running, compensating) and the parked ones (failed) by type and status, from
// their partial indexes: /metrics reads what is bounded by the work in flight, not the history.
std::string OpenSagasStatement();

// Time until the earliest pending deadline or retry (zero if one is due); nullopt if none pends.
std::optional<std::chrono::milliseconds> NextTimer(pqxx::transaction_base& tx);

// A step attempt's two clocks (TimerService::HoldTimeout), read with its command's outbox row.
struct StepClock {
    std::chrono::milliseconds since_dispatch{0};  // since the attempt was dispatched
    std::chrono::milliseconds overdue{0};         // past the deadline replies must be read up to
    bool waiting = false;                         // waiting for its participant to read the command
    bool published = false;                       // the command left the outbox
    std::string topic;                            // where the relay put it, once published
    std::optional<int> partition;
    std::int64_t offset = -1;
    std::optional<std::chrono::milliseconds> published_ago;
};
// nullopt when the attempt is not the dispatched one (answered, or a newer attempt runs).
std::optional<StepClock> ReadStepClock(pqxx::transaction_base& tx,
                                       const std::string& saga_id,
                                       const std::string& step_name,
                                       const std::string& phase,
                                       int attempt,
                                       std::chrono::milliseconds timeout);

// How a held step timeout moves (MoveStepDeadline): kWaitForRead — the command is unread
// (waiting_since: the attempt's dispatch, set once); kWaitForReplies — replies are unread, or the
// group follower has not looked yet (timeout_due_at: the deadline they must be read up to, set
// once); kRestart — read late, the timeout counts anew from the read (both cleared).
enum class StepHold { kWaitForRead = 0, kWaitForReplies = 1, kRestart = 2 };
void MoveStepDeadline(pqxx::transaction_base& tx,
                      const std::string& saga_id,
                      const std::string& step_name,
                      const std::string& phase,
                      std::chrono::milliseconds delay,
                      std::chrono::milliseconds timeout,
                      StepHold hold);

// A saga's deadline that passed after its point of no return no longer applies.
void ClearSagaDeadline(pqxx::transaction_base& tx, const std::string& saga_id);

// The saga an idempotency key started, and whether it was started with `input` (jsonb equality:
// key order and whitespace do not matter).
struct KeyedSaga {
    std::string saga_id;
    bool same_input = false;
};
KeyedSaga FindByIdempotencyKey(pqxx::transaction_base& tx,
                               const std::string& saga_type,
                               const std::string& key,
                               const std::string& input_json);

// Sagas running or compensating.
std::int64_t CountOpenSagas(pqxx::transaction_base& tx);

// Unpublished outbox rows and the age of the oldest, in seconds.
std::pair<long long, double> OutboxBacklog(pqxx::transaction_base& tx);

// Writes a definition to saga_definition (nothing if it is there); throws EngineError when the
// database holds the same name and version with other content.
void WriteDefinition(pqxx::transaction_base& tx, const SagaDefinition& definition, const std::string& source);

// Re-opens the phase that made the locked, parked saga give up (its most recent failed phase):
// dispatched again with its retry due now, the saga running (or compensating) again. Returns the
// phase's step name, or empty if there is none.
std::string ReopenParked(pqxx::transaction_base& tx, const LoadedSaga& saga);

// The saga, its step phases and its timeline, as Engine::GetSaga and `sagaflow show` present
// them; nullopt if there is no such saga.
std::optional<SagaView> ReadSagaView(pqxx::transaction_base& tx, const std::string& saga_id);
// A definition stored in saga_definition, loaded back and checked against its hash.
SagaDefinition ReadStoredDefinition(pqxx::transaction_base& tx, const std::string& type, const std::string& hash);
// The graph overlay of a saga instance: its status and each step phase's.
GraphOverlay OverlayOf(const SagaView& saga);
// The saga as GET /v1/sagas/{id} and `sagaflow show --format json` answer it.
nlohmann::json SagaJson(const SagaView& saga);

}  // namespace sagaflow::detail
