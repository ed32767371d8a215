#include "engine/repository/saga_store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <tuple>

#include <pqxx/pqxx>

#include "outbox/uuid.hpp"
#include "outbox/writer.hpp"
#include "store/array_columns.hpp"
#include "store/prepared.hpp"
#include "store/test_guards.hpp"

namespace sagaflow::detail {

using machine::ParsePhase;
using machine::ParseSagaStatus;
using machine::Phase;
using machine::StepStatus;

namespace {

nlohmann::json ParseJson(const pqxx::field& field) {
    if (field.is_null()) return nullptr;
    return nlohmann::json::parse(field.c_str());
}

// The context command templates are rendered against (definition.hpp: RenderTemplate).
nlohmann::json TemplateContext(const LoadedSaga& saga, const machine::SagaState& state) {
    nlohmann::json steps = nlohmann::json::object();
    for (const auto& phase : state.phases) {
        if (phase.phase == Phase::kAction && phase.status == StepStatus::kSucceeded) {
            steps[phase.step_name] = {{"reply", phase.reply}};
        }
    }
    return {{"sagaId", saga.saga_id}, {"input", saga.input}, {"data", state.data}, {"steps", steps}};
}

std::chrono::milliseconds WithJitter(std::chrono::milliseconds delay, double jitter, std::mt19937_64& rng) {
    if (jitter <= 0 || delay.count() <= 0) return delay;
    // Up to `jitter` of the delay is drawn at random (subtracted), so retries of many sagas that
    // failed together spread out instead of arriving together.
    std::uniform_real_distribution<double> draw(0.0, jitter);
    const double factor = 1.0 - draw(rng);
    return std::chrono::milliseconds(static_cast<std::int64_t>(static_cast<double>(delay.count()) * factor));
}

void Earliest(Effects& effects, std::chrono::milliseconds delay) {
    if (!effects.next_timer || delay < *effects.next_timer) effects.next_timer = delay;
}

}  // namespace

std::optional<long long> SagaLockKey(const std::string& saga_id) {
    std::string hex;
    for (const char c : saga_id) {
        if (c != '-') hex += c;
    }
    std::uint64_t key = 0;
    if (hex.size() != 32) return std::nullopt;
    const auto [end, error] = std::from_chars(hex.data() + 16, hex.data() + 32, key, 16);
    if (error != std::errc{} || end != hex.data() + 32) return std::nullopt;
    return static_cast<long long>(key);
}

namespace {
// Locked in key order, so two engines locking overlapping batches cannot deadlock.
std::map<long long, std::vector<std::string>> ByLockKey(const std::vector<std::string>& saga_ids) {
    std::map<long long, std::vector<std::string>> by_key;
    for (const auto& id : saga_ids) {
        if (const auto key = SagaLockKey(id)) by_key[*key].push_back(id);
    }
    return by_key;
}

std::string KeyArray(const std::map<long long, std::vector<std::string>>& by_key) {
    std::vector<long long> keys;
    for (const auto& [key, ids] : by_key) keys.push_back(key);
    return store::BigintArray(keys);
}
}  // namespace

std::vector<std::string> LockAndReadArguments(const std::vector<std::string>& saga_ids) {
    return {KeyArray(ByLockKey(saga_ids)), store::UuidArray(saga_ids)};
}

std::map<std::string, LoadedSaga> ReadSagas(const pqxx::result& rows) {
    std::map<std::string, LoadedSaga> sagas;
    LoadedSaga* saga = nullptr;
    for (const auto& row : rows) {
        const std::string saga_id = row[0].as<std::string>();
        if (saga == nullptr || saga->saga_id != saga_id) {
            LoadedSaga loaded;
            loaded.saga_id = saga_id;
            loaded.saga_type = row[1].as<std::string>();
            loaded.definition_hash = row[2].as<std::string>();
            const auto status = ParseSagaStatus(row[3].as<std::string>());
            if (!status) throw std::runtime_error("saga " + saga_id + " has an unknown status " + row[3].c_str());
            loaded.state.status = *status;
            loaded.state.current_step = row[4].as<std::size_t>();
            loaded.input = ParseJson(row[5]);
            loaded.state.data = ParseJson(row[6]);
            loaded.state.parked_reason = row[7].as<std::string>();
            loaded.traceparent = row[8].as<std::string>();
            loaded.tracestate = row[9].as<std::string>();
            saga = &sagas.emplace(saga_id, std::move(loaded)).first->second;
        }
        if (row[10].is_null()) continue;  // a saga with no step phase yet
        machine::StepPhaseState phase;
        phase.step_name = row[10].as<std::string>();
        phase.phase = ParsePhase(row[11].as<std::string>()).value_or(Phase::kAction);
        machine::SetStatus(
            phase,
            machine::ParseStepPhaseStatus(row[12].as<std::string>()).value_or(machine::StepPhaseStatus::kFailed));
        phase.attempt = row[13].as<int>();
        phase.reply = ParseJson(row[14]);
        phase.awaiting_retry = row[15].as<bool>();
        saga->command_ids[{phase.step_name, row[11].as<std::string>()}] = row[16].as<std::string>();
        if (!row[17].is_null())
            saga->dispatch_ages[{phase.step_name, row[11].as<std::string>()}] = row[17].as<double>();
        saga->state.phases.push_back(std::move(phase));
    }
    return sagas;
}

std::map<std::string, LoadedSaga> LockSagas(pqxx::transaction_base& tx,
                                            const std::vector<std::string>& saga_ids,
                                            LockMode mode) {
    const auto by_key = ByLockKey(saga_ids);
    if (by_key.empty()) return {};
    if (mode == LockMode::kWait) {
        return ReadSagas(store::ExecTexts(tx, kLockAndReadSagasSql, {KeyArray(by_key), store::UuidArray(saga_ids)}));
    }
    std::vector<std::string> locked;
    for (const auto& row : store::Exec(
             tx, "SELECT k FROM unnest($1::bigint[]) AS k WHERE pg_try_advisory_xact_lock(k)", KeyArray(by_key))) {
        const auto& ids = by_key.at(row[0].as<long long>());
        locked.insert(locked.end(), ids.begin(), ids.end());
    }
    if (locked.empty()) return {};
    // Read after the locks, by a statement of its own, so its snapshot shows the previous holder's
    // commit (no keys: the function only reads).
    return ReadSagas(store::ExecTexts(tx, kLockAndReadSagasSql, {"{}", store::UuidArray(locked)}));
}

std::optional<LoadedSaga> LockSaga(pqxx::transaction_base& tx, const std::string& saga_id, LockMode mode) {
    auto sagas = LockSagas(tx, {saga_id}, mode);
    if (sagas.empty()) return std::nullopt;
    return std::move(sagas.begin()->second);
}

void RecordEvents(pqxx::transaction_base& tx, const std::string& saga_id, const std::vector<TimelineRow>& rows) {
    if (rows.empty()) return;
    WriteBatch batch;
    for (const auto& row : rows) batch.Record(saga_id, row);
    batch.Flush(tx);
}

void RecordEvent(pqxx::transaction_base& tx,
                 const std::string& saga_id,
                 const std::string& kind,
                 const std::string& step_name,
                 const std::string& phase,
                 int attempt,
                 const std::string& event_id,
                 const nlohmann::json& detail) {
    RecordEvents(tx, saga_id, {{kind, step_name, phase, attempt, event_id, detail}});
}

bool WriteBatch::Holds(const std::string& saga_id) const {
    return std::find(sagas_.begin(), sagas_.end(), saga_id) != sagas_.end();
}

void WriteBatch::Record(const std::string& saga_id, TimelineRow row) {
    timeline_.push_back({saga_id, std::move(row), false});
}

namespace {

using store::ArrayColumns;
using store::ArrayStatement;

std::optional<std::string> Nullable(const std::string& text) {
    return text.empty() ? std::nullopt : std::optional<std::string>(text);
}

const char* Bool(bool value) {
    return value ? "t" : "f";
}

// A timeline entry's columns after its saga id (saga_event's kind, step, phase, attempt, event id,
// detail).
std::vector<ArrayColumns::Column> TimelineColumns() {
    return {{"kind", "text"},
            {"step_name", "text"},
            {"phase", "text"},
            {"attempt", "int"},
            {"event_id", "uuid"},
            {"detail", "text"}};
}

std::vector<ArrayColumns::Value> TimelineValues(const TimelineRow& row) {
    return {row.kind,
            Nullable(row.step_name),
            Nullable(row.phase),
            row.attempt > 0 ? std::optional<std::string>(std::to_string(row.attempt)) : std::nullopt,
            Nullable(row.event_id),
            row.detail.is_null() ? std::string("{}") : row.detail.dump()};
}

// Inserts the timeline entries of `entries` (a relation with saga_id, TimelineColumns() and the
// order `n`): one saga_event row per saga, its first entry in the row's columns and the rest, in
// order, in `later` (015: one row instead of one per entry, two WAL records fewer for each entry
// after the first). Entries without a saga keep a row each.
std::string InsertTimelineSql(const std::string& entries) {
    return "INSERT INTO saga_event (saga_id, kind, step_name, phase, attempt, event_id, detail, later) "
           "SELECT saga_id, kind, step_name, phase, attempt, event_id, detail::jsonb, "
           "CASE WHEN saga_id IS NOT NULL THEN later END FROM (SELECT t.*, row_number() OVER w AS seq, "
           "jsonb_agg(jsonb_strip_nulls(jsonb_build_object('kind', kind, 'step_name', step_name, 'phase', phase, "
           "'attempt', attempt, 'event_id', event_id, 'detail', detail::jsonb))) OVER (w ROWS BETWEEN 1 FOLLOWING "
           "AND UNBOUNDED FOLLOWING) AS later FROM (" +
           entries + ") t WINDOW w AS (PARTITION BY saga_id ORDER BY n)) f WHERE seq = 1 OR saga_id IS NULL ORDER BY n";
}

// New step phases with their commands' outbox rows, for NewStepsSql.
template <typename NewStep>
ArrayColumns NewStepColumns(const std::vector<NewStep>& steps) {
    ArrayColumns columns{{{"saga_id", "uuid"},
                          {"step_name", "text"},
                          {"phase", "text"},
                          {"timeout_ms", "bigint"},
                          {"event_id", "uuid"},
                          {"topic", "text"},
                          {"message_key", "text"},
                          {"headers", "text"},
                          {"payload", "text"},
                          {"status", "text"}}};
    for (const auto& n : steps) {
        std::vector<ArrayColumns::Value> row{n.saga_id, n.step_name, n.phase, n.timeout_ms};
        for (std::size_t i = 0; i < 5; ++i) row.emplace_back(n.outbox.at(i));
        row.emplace_back(n.status);
        columns.Add(std::move(row));
    }
    return columns;
}

// Common table expressions `v` (the new phases) and `step` (their step rows, RETURNING the command
// event id of each row that was new), optionally only `if` a condition holds. A skipped step's row
// has an event id that no outbox row carries (kDispatchedSteps joins only dispatched ones). A step row is the
// dedup key of its phase: the outbox row goes in only with a new step row (joined on `step`), in
// the order the decisions were made (the relay keeps each key's order by id). A phase that has a
// row already, or comes twice in `v`, is left out by a lookup, not by `ON CONFLICT` (which writes a
// second WAL record, the speculative insert's confirmation, for every row): the saga's lock
// serialises its writers, so no concurrent insert of the phase can come between the lookup and
// the insert, and if one ever did the primary key would refuse it and the transaction would roll
// back whole.
std::string NewStepsSql(ArrayStatement& statement, const ArrayColumns& steps, const std::string& condition = "") {
    return "v AS (SELECT * FROM " + statement.Unnest(steps, "u", true) +
           "), "
           "step AS (INSERT INTO saga_step (saga_id, step_name, phase, status, attempt, command_event_id, "
           "deadline_at, completed_at) SELECT saga_id, step_name, phase, status, 1, event_id, CASE WHEN status = "
           "'dispatched' THEN clock_timestamp() + timeout_ms * interval '1 millisecond' END, CASE WHEN status = "
           "'skipped' THEN clock_timestamp() END FROM v WHERE " +
           (condition.empty() ? "" : condition + " AND ") +
           "NOT EXISTS (SELECT FROM saga_step s WHERE s.saga_id = v.saga_id AND s.step_name = v.step_name AND "
           "s.phase = v.phase) AND NOT EXISTS (SELECT FROM v w WHERE w.saga_id = v.saga_id AND w.step_name = "
           "v.step_name AND w.phase = v.phase AND w.n < v.n) ORDER BY n RETURNING command_event_id)";
}

// The new phases' rows that carry a command.
constexpr const char* kDispatchedSteps =
    "JOIN step ON step.command_event_id = v.event_id WHERE v.status = 'dispatched'";

}  // namespace

std::vector<std::pair<std::string, double>> WriteBatch::Flush(pqxx::transaction_base& tx) {
    auto pending = TakeStatement();
    if (pending.statement) store::ExecTexts(tx, pending.statement->sql, pending.statement->params);
    return std::move(pending.latencies);
}

WriteBatch::Pending WriteBatch::TakeStatement() {
    Pending pending;
    if (Empty()) {
        sagas_.clear();  // no statement
        return pending;
    }
    for (const auto& u : updates_) {
        if (u.measure) pending.latencies.emplace_back(u.step_name, u.seconds);
    }
    // Everything queued in one statement (one round trip): the answered phases, the new ones with
    // their commands, the timeline and the saga rows. Its text is the same for any number of
    // rows: the values travel as arrays, an empty part as empty arrays.
    ArrayColumns answered{{{"saga_id", "uuid"},
                           {"step_name", "text"},
                           {"phase", "text"},
                           {"status", "text"},
                           {"reply", "text"},
                           {"open", "bool"},
                           {"awaiting", "bool"}}};
    for (const auto& u : updates_) {
        answered.Add(
            {u.saga_id, u.step_name, u.phase, u.status, u.reply, Bool(u.open), Bool(u.open && u.awaiting_retry)});
    }
    auto timeline_columns = TimelineColumns();
    timeline_columns.insert(timeline_columns.begin(), {"saga_id", "uuid"});
    timeline_columns.push_back({"if_dispatched", "bool"});
    ArrayColumns timeline{timeline_columns};
    for (const auto& e : timeline_) {
        auto row = TimelineValues(e.row);
        row.insert(row.begin(), Nullable(e.saga_id));
        row.emplace_back(Bool(e.if_dispatched));
        timeline.Add(std::move(row));
    }
    ArrayColumns sagas{{{"saga_id", "uuid"},
                        {"status", "text"},
                        {"current_step", "int"},
                        {"data", "text"},
                        {"parked_reason", "text"}}};
    for (const auto& r : saga_rows_) sagas.Add({r.saga_id, r.status, r.current_step, r.data, r.parked_reason});

    ArrayStatement statement;
    // A timeline entry that announces a dispatch goes in only if this statement's outbox row was
    // new (not if the phase was dispatched before: never twice).
    std::string sql =
        "WITH answered AS (UPDATE saga_step s SET status = a.status, reply = a.reply::jsonb, "
        "completed_at = CASE WHEN a.open THEN NULL ELSE clock_timestamp() END, "
        "next_attempt_at = CASE WHEN a.awaiting THEN s.next_attempt_at END, "
        "deadline_at = CASE WHEN a.open AND NOT a.awaiting THEN s.deadline_at END FROM " +
        statement.Unnest(answered, "a") +
        " WHERE s.saga_id = a.saga_id AND s.step_name = a.step_name AND s.phase = a.phase), ";
    sql += NewStepsSql(statement, NewStepColumns(new_steps_));
    sql += ", dispatch AS (" + outbox::InsertRowsFrom("v", kDispatchedSteps) +
           " RETURNING event_id), "
           "timeline AS (" +
           InsertTimelineSql("SELECT * FROM " + statement.Unnest(timeline, "e", true) +
                             " WHERE NOT e.if_dispatched OR e.event_id IN (SELECT event_id FROM dispatch)") +
           "), "
           "saga AS (UPDATE saga_instance s SET status = r.status, current_step = r.current_step, "
           "data = r.data::jsonb, parked_reason = r.parked_reason, updated_at = clock_timestamp(), "
           "version = s.version + 1 FROM " +
           statement.Unnest(sagas, "r") +
           " WHERE s.saga_id = r.saga_id) "
           "SELECT";
    pending.statement = statement.ToStatement(sql);
    sagas_.clear();
    updates_.clear();
    new_steps_.clear();
    saga_rows_.clear();
    timeline_.clear();
    return pending;
}

store::Statement WriteBatch::StartStatement(const NewSaga& saga) {
    const SagaRow& row = saga_rows_.at(0);
    ArrayColumns saga_row{{{"s", "uuid"},
                           {"t", "text"},
                           {"v", "int"},
                           {"h", "text"},
                           {"st", "text"},
                           {"c", "int"},
                           {"d", "text"},
                           {"p", "text"},
                           {"i", "text"},
                           {"k", "text"},
                           {"tp", "text"},
                           {"ts", "text"},
                           {"dl", "bigint"}}};
    saga_row.Add({row.saga_id,
                  saga.saga_type,
                  std::to_string(saga.definition_version),
                  saga.definition_hash,
                  row.status,
                  row.current_step,
                  row.data,
                  row.parked_reason,
                  saga.input,
                  saga.idempotency_key,
                  Nullable(saga.traceparent),
                  Nullable(saga.tracestate),
                  saga.deadline_ms ? std::optional<std::string>(std::to_string(*saga.deadline_ms)) : std::nullopt});
    // A new saga's dispatches are all new: every entry goes in.
    ArrayColumns timeline{TimelineColumns()};
    for (const auto& e : timeline_) timeline.Add(TimelineValues(e.row));
    ArrayStatement statement;
    // The saga row with its first state (version 1, updated now), its timeline, and its first step
    // rows with their commands, in one statement; the steps only if the saga row went in (its
    // idempotency key was free).
    std::string sql =
        "WITH saga AS (INSERT INTO saga_instance (saga_id, saga_type, definition_version, definition_hash, status, "
        "current_step, data, parked_reason, input, idempotency_key, traceparent, tracestate, deadline_at, "
        "updated_at, version) SELECT s, t, v, h, st, c, d::jsonb, p, i::jsonb, k, tp, ts, clock_timestamp() + dl * "
        "interval '1 millisecond', clock_timestamp(), 1 FROM " +
        statement.Unnest(saga_row, "u") +
        " ON CONFLICT (saga_type, idempotency_key) DO NOTHING RETURNING saga_id), "
        "timeline AS (" +
        InsertTimelineSql("SELECT saga.saga_id, e.* FROM saga, " + statement.Unnest(timeline, "e", true)) + "), ";
    sql += NewStepsSql(statement, NewStepColumns(new_steps_), "EXISTS (SELECT FROM saga)");
    sql +=
        ", dispatch AS (" + outbox::InsertRowsFrom("v", kDispatchedSteps) + " RETURNING 1) SELECT count(*) FROM saga";
    sagas_.clear();
    updates_.clear();
    saga_rows_.clear();
    timeline_.clear();
    new_steps_.clear();
    return statement.ToStatement(std::move(sql));
}

// One decision's writes, queued in a WriteBatch: the changed step phases, each command's rows and
// timeline entries, then the saga row and its timeline.
class Persistence {
  public:
    Persistence(pqxx::transaction_base* tx,
                const SagaDefinition& definition,
                const LoadedSaga& saga,
                const machine::Decision& decision,
                const std::string& event_source,
                std::mt19937_64& rng,
                std::vector<TimelineRow> timeline,
                WriteBatch& writes)
        : tx_(tx),
          definition_(definition),
          saga_(saga),
          decision_(decision),
          next_(decision.state),
          event_source_(event_source),
          rng_(rng),
          timeline_(std::move(timeline)),
          if_dispatched_(timeline_.size(), false),
          writes_(writes) {}

    Effects Run() {
        writes_.sagas_.push_back(saga_.saga_id);
        StepUpdates();
        // Resends and retries update step rows in place: the queued updates of those rows go first.
        if (UpdatesInPlace()) effects_.step_latencies = writes_.Flush(Tx());
        for (const auto& command : decision_.commands) {
            if (const auto* dispatch = std::get_if<machine::Dispatch>(&command)) {
                if (saga_.state.Find(dispatch->step_name, dispatch->phase) == nullptr) {
                    DispatchNew(*dispatch);
                } else {
                    Resend(*dispatch);
                }
                Earliest(effects_, dispatch->timeout);
            } else if (const auto* retry = std::get_if<machine::ScheduleRetry>(&command)) {
                Retry(*retry);
            } else if (const auto* finish = std::get_if<machine::Finish>(&command)) {
                Finish(*finish);
            } else if (const auto* skip = std::get_if<machine::Skip>(&command)) {
                Skip(*skip);
            }
        }
        SagaRowAndTimeline();
        return std::move(effects_);
    }

  private:
    // The transaction for the writes made in place (a resend, a retry); a decision planned without
    // one (PlanStart) has none to make.
    pqxx::transaction_base& Tx() const {
        if (tx_ == nullptr) throw std::logic_error("a decision planned without a transaction writes in place");
        return *tx_;
    }

    void Record(TimelineRow row, bool if_dispatched) {
        timeline_.push_back(std::move(row));
        if_dispatched_.push_back(if_dispatched);
    }

    // Step phases that changed (new ones are written by DispatchNew).
    void StepUpdates() {
        for (const auto& phase : next_.phases) {
            const machine::StepPhaseState* before = saga_.state.Find(phase.step_name, phase.phase);
            if (before == nullptr) continue;
            if (before->status == phase.status && before->outcome_unknown == phase.outcome_unknown &&
                before->reply == phase.reply && before->awaiting_retry == phase.awaiting_retry) {
                continue;
            }
            const bool open = phase.status == StepStatus::kDispatched;
            writes_.updates_.push_back(
                {saga_.saga_id,
                 phase.step_name,
                 std::string(machine::ToString(phase.phase)),
                 std::string(machine::ToString(machine::StatusOf(phase))),
                 phase.reply.is_null() ? std::nullopt : std::optional<std::string>(phase.reply.dump()),
                 open,
                 phase.awaiting_retry,
                 !open && before->status == StepStatus::kDispatched,
                 DispatchAge(phase)});
        }
    }

    double DispatchAge(const machine::StepPhaseState& phase) const {
        const auto it = saga_.dispatch_ages.find({phase.step_name, std::string(machine::ToString(phase.phase))});
        return it == saga_.dispatch_ages.end() ? 0.0 : it->second;
    }

    bool UpdatesInPlace() const {
        return std::any_of(decision_.commands.begin(), decision_.commands.end(), [&](const auto& command) {
            const auto* dispatch = std::get_if<machine::Dispatch>(&command);
            return std::holds_alternative<machine::ScheduleRetry>(command) ||
                   (dispatch != nullptr && saga_.state.Find(dispatch->step_name, dispatch->phase) != nullptr);
        });
    }

    // A new step phase: its row is the dedup key, its event id is minted once, here.
    void DispatchNew(const machine::Dispatch& dispatch) {
        const StepDefinition* step = definition_.FindStep(dispatch.step_name);
        const std::string phase_text(machine::ToString(dispatch.phase));
        const CommandSpec& spec = dispatch.phase == Phase::kAction ? step->action : *step->compensation;
        outbox::CloudEvent event;
        event.id = outbox::NewUuidV7();
        event.type = spec.type;
        event.source = event_source_;
        event.saga_id = saga_.saga_id;
        event.step_name = step->name;
        event.phase = phase_text;
        event.traceparent = saga_.traceparent;
        event.tracestate = saga_.tracestate;
        event.data = RenderTemplate(spec.send, TemplateContext(saga_, next_));
        outbox::OutboxRow row = outbox::MakeOutboxRow(step->CommandTopic(), saga_.saga_id, event, 1);
        writes_.new_steps_.push_back(
            {saga_.saga_id, step->name, phase_text, std::to_string(dispatch.timeout.count()), std::move(row.params)});
        // Recorded only if the phase was not dispatched before: never twice.
        Record({"dispatched", step->name, phase_text, 1, event.id, {{"type", spec.type}}}, true);
    }

    // A step whose condition was false: its row, no command.
    void Skip(const machine::Skip& skip) {
        writes_.new_steps_.push_back(
            {saga_.saga_id, skip.step_name, "action", "0", {outbox::NewUuidV7(), "", "", "{}", "{}"}, "skipped"});
        Record({"skipped", skip.step_name, "action", 0, {}, {{"reason", skip.reason}}}, false);
    }

    // A resend: the same row, the same event id, the same bytes.
    void Resend(const machine::Dispatch& dispatch) {
        const std::string phase_text(machine::ToString(dispatch.phase));
        const auto row = store::Exec(Tx(),
                                     "UPDATE saga_step SET attempt = $4, next_attempt_at = NULL, waiting_since = NULL, "
                                     "timeout_due_at = NULL, deadline_at = clock_timestamp() + $5 * interval '1 "
                                     "millisecond' WHERE saga_id = $1::uuid AND step_name = $2 AND phase = $3 "
                                     "RETURNING command_event_id::text",
                                     saga_.saga_id,
                                     dispatch.step_name,
                                     phase_text,
                                     dispatch.attempt,
                                     dispatch.timeout.count());
        std::string event_id = row.at(0)[0].as<std::string>();
        if (store::GuardDisabled("dispatch-dedup")) {
            // TEST ONLY: the resend as a new message, the mistake the dedup key exists for.
            const auto copy =
                store::Exec(Tx(), "SELECT topic, payload::text FROM outbox WHERE event_id = $1::uuid", event_id);
            std::string reason;
            auto event = outbox::ParseCloudEvent(copy.at(0)[1].c_str(), reason);
            event->id = outbox::NewUuidV7();
            event_id = outbox::Enqueue(Tx(), copy[0][0].as<std::string>(), saga_.saga_id, *event);
        } else {
            outbox::Rearm(Tx(), event_id);
        }
        Record({"resent", dispatch.step_name, phase_text, dispatch.attempt, event_id, {}}, false);
    }

    void Retry(const machine::ScheduleRetry& retry) {
        const StepDefinition* step = definition_.FindStep(retry.step_name);
        const RetryPolicy& policy = retry.phase == Phase::kAction ? step->retry : definition_.compensation_retry;
        const auto delay = WithJitter(retry.delay, policy.jitter, rng_);
        const std::string phase_text(machine::ToString(retry.phase));
        store::Exec(Tx(),
                    "UPDATE saga_step SET deadline_at = NULL, "
                    "next_attempt_at = clock_timestamp() + $4 * interval '1 millisecond' "
                    "WHERE saga_id = $1::uuid AND step_name = $2 AND phase = $3",
                    saga_.saga_id,
                    retry.step_name,
                    phase_text,
                    delay.count());
        Record({"retry-scheduled", retry.step_name, phase_text, retry.attempt, {}, {{"delayMs", delay.count()}}},
               false);
        Earliest(effects_, delay);
    }

    void Finish(const machine::Finish& finish) {
        nlohmann::json detail{{"status", machine::ToString(finish.status)}};
        if (!next_.parked_reason.empty()) detail["reason"] = next_.parked_reason;
        Record({"finished", {}, {}, 0, {}, detail}, false);
        effects_.finished = true;
        effects_.parked = finish.status == machine::SagaStatus::kFailed;
    }

    // The saga row and the timeline (written together).
    void SagaRowAndTimeline() {
        writes_.saga_rows_.push_back(
            {saga_.saga_id,
             std::string(machine::ToString(next_.status)),
             std::to_string(next_.current_step),
             next_.data.dump(),
             next_.parked_reason.empty() ? std::nullopt : std::optional<std::string>(next_.parked_reason)});
        for (std::size_t i = 0; i < timeline_.size(); ++i) {
            writes_.timeline_.push_back({saga_.saga_id, std::move(timeline_[i]), if_dispatched_[i]});
        }
    }

    pqxx::transaction_base* tx_;
    const SagaDefinition& definition_;
    const LoadedSaga& saga_;
    const machine::Decision& decision_;
    const machine::SagaState& next_;
    const std::string& event_source_;
    std::mt19937_64& rng_;
    std::vector<TimelineRow> timeline_;
    std::vector<bool> if_dispatched_;
    WriteBatch& writes_;
    Effects effects_;
};

Effects Persist(pqxx::transaction_base* tx,
                const SagaDefinition& definition,
                const LoadedSaga& saga,
                const machine::Decision& decision,
                const std::string& event_source,
                std::mt19937_64& rng,
                std::vector<TimelineRow> timeline,
                WriteBatch* batch) {
    if (tx == nullptr && batch == nullptr)
        throw std::logic_error("a decision queued without a transaction needs a batch");
    WriteBatch own;
    Effects effects =
        Persistence(
            tx, definition, saga, decision, event_source, rng, std::move(timeline), batch != nullptr ? *batch : own)
            .Run();
    if (batch == nullptr) {
        auto latencies = own.Flush(*tx);
        effects.step_latencies.insert(effects.step_latencies.end(), latencies.begin(), latencies.end());
    }
    return effects;
}

std::string ReopenParked(pqxx::transaction_base& tx, const LoadedSaga& saga) {
    const machine::StepPhaseState* gave_up = nullptr;
    for (auto it = saga.state.phases.rbegin(); it != saga.state.phases.rend(); ++it) {
        if (it->status == StepStatus::kFailed) {
            gave_up = &*it;
            break;
        }
    }
    if (gave_up == nullptr) return {};
    const std::string phase_text(machine::ToString(gave_up->phase));
    store::Exec(tx,
                "UPDATE saga_step SET status = 'dispatched', completed_at = NULL, deadline_at = NULL, "
                "next_attempt_at = clock_timestamp() WHERE saga_id = $1::uuid AND step_name = $2 AND phase = $3",
                saga.saga_id,
                gave_up->step_name,
                phase_text);
    store::Exec(tx,
                "UPDATE saga_instance SET status = $2, parked_reason = NULL, updated_at = clock_timestamp(), "
                "version = version + 1 WHERE saga_id = $1::uuid",
                saga.saga_id,
                gave_up->phase == Phase::kCompensation ? "compensating" : "running");
    RecordEvent(tx,
                saga.saga_id,
                "operator-retry",
                gave_up->step_name,
                phase_text,
                gave_up->attempt + 1,
                {},
                {{"reason", saga.state.parked_reason}});
    return gave_up->step_name;
}

std::string ListSagasStatement() {
    // ORDER BY names the table's column: the output column saga_id is text, and ordering by it
    // sorted the whole table. A key without a type is looked up under every registered type (the
    // key's unique index leads with the type).
    return "SELECT s.saga_id::text AS saga_id, s.saga_type, s.status, to_char(s.created_at AT TIME ZONE 'UTC', "
           "'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), to_char(s.updated_at AT TIME ZONE 'UTC', "
           "'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), coalesce(s.idempotency_key, '') FROM saga_instance s "
           "WHERE ($1 = '' OR s.status = $1) AND ($2 = '' OR s.saga_type = $2) AND ($3 = '' OR s.saga_id < $3::uuid) "
           "AND ($5 = '' OR s.saga_id <= $5::uuid) AND ($6 = '' OR s.saga_id >= $6::uuid) "
           "AND ($7 = '' OR (s.idempotency_key = ANY (string_to_array($7, chr(31))) AND s.saga_type = ANY (ARRAY("
           "SELECT DISTINCT saga_type FROM saga_definition)))) ORDER BY s.saga_id DESC LIMIT $4";
}

namespace {

// 32 hex digits as 8-4-4-4-12.
std::string UuidText(const std::string& hex) {
    return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" + hex.substr(16, 4) + "-" +
           hex.substr(20);
}

// The lowest or highest UUID v7 minted in the millisecond of `at`.
std::string V7Bound(std::chrono::system_clock::time_point at, bool high) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count();
    return UuidText(fmt::format("{:012x}", std::max<std::int64_t>(0, ms)) + std::string(20, high ? 'f' : '0'));
}

}  // namespace

std::optional<IdRange> ListIdRange(const ListQuery& query, std::chrono::system_clock::time_point now) {
    IdRange range;
    const auto narrow = [&](const std::string& low, const std::string& high) {
        if (!low.empty() && (range.low.empty() || low > range.low)) range.low = low;
        if (!high.empty() && (range.high.empty() || high < range.high)) range.high = high;
    };
    if (!query.id_prefix.empty()) {
        std::string hex;
        for (const char c : query.id_prefix) {
            if (c == '-') continue;
            if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
            hex += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        }
        if (hex.empty() || hex.size() > 32) return std::nullopt;
        narrow(UuidText(hex + std::string(32 - hex.size(), '0')), UuidText(hex + std::string(32 - hex.size(), 'f')));
    }
    if (query.min_age) narrow({}, V7Bound(now - *query.min_age, true));
    if (query.max_age) narrow(V7Bound(now - *query.max_age, false), {});
    return range;
}

SagaOverview ReadOverview(pqxx::transaction_base& tx) {
    SagaOverview o;
    for (const char* status : {"running", "compensating", "failed", "completed", "compensated"}) o.counts[status] = 0;
    for (const auto& row :
         tx.exec("SELECT status, count(*) FROM saga_instance WHERE status IN ('running', 'compensating') GROUP BY 1 "
                 "UNION ALL SELECT 'failed', count(*) FROM saga_instance WHERE status = 'failed'")) {
        o.counts[row[0].as<std::string>()] = row[1].as<long long>();
    }
    // Finished sagas: counted while the table is small; from the planner's statistics (the share of
    // each status in the last ANALYZE's sample, times the live rows) once counting would read a
    // large table.
    const auto rows =
        tx.exec1("SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'saga_instance'::regclass")[0]
            .as<long long>();
    pqxx::result finished;
    if (rows < 100'000) {
        finished = tx.exec(
            "SELECT status, count(*) FROM saga_instance WHERE status IN ('completed', 'compensated') GROUP BY 1");
    } else {
        o.estimated = true;
        finished = tx.exec(
            "SELECT m.status, round(m.share * (SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = "
            "'saga_instance'::regclass))::bigint FROM pg_stats s, unnest(s.most_common_vals::text::text[], "
            "s.most_common_freqs) AS m(status, share) WHERE s.schemaname = current_schema() AND s.tablename = "
            "'saga_instance' AND s.attname = 'status' AND m.status IN ('completed', 'compensated')");
    }
    for (const auto& row : finished) o.counts[row[0].as<std::string>()] = row[1].as<long long>();
    for (const auto& row : tx.exec("SELECT DISTINCT saga_type FROM saga_definition ORDER BY 1")) {
        o.saga_types.push_back(row[0].as<std::string>());
    }
    const auto oldest = tx.exec(
        "SELECT saga_id::text, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
        "extract(epoch FROM clock_timestamp() - created_at)::float8 FROM saga_instance WHERE status IN ('running', "
        "'compensating') ORDER BY saga_id LIMIT 1");
    if (!oldest.empty()) {
        o.oldest_open_id = oldest[0][0].as<std::string>();
        o.oldest_open_created_at = oldest[0][1].as<std::string>();
        o.oldest_open_seconds = oldest[0][2].as<double>();
    }
    std::tie(o.outbox_backlog, o.oldest_unpublished_seconds) = OutboxBacklog(tx);
    return o;
}

std::string OpenSagasStatement() {
    return "SELECT saga_type, status, count(*) FROM saga_instance WHERE status IN ('running', 'compensating') "
           "GROUP BY 1, 2 UNION ALL SELECT saga_type, status, count(*) FROM saga_instance WHERE status = 'failed' "
           "GROUP BY 1, 2";
}

std::vector<DueTimer> DueTimers(pqxx::transaction_base& tx, int limit) {
    // Three index-backed parts: deadlines of open phases, backoffs that elapsed, and the deadlines
    // of running sagas.
    const auto rows = tx.exec_params(
        "(SELECT saga_id::text, step_name, phase, attempt, false, false FROM saga_step "
        "  WHERE status = 'dispatched' AND next_attempt_at IS NULL AND deadline_at <= clock_timestamp() "
        "  ORDER BY deadline_at LIMIT $1) "
        "UNION ALL "
        "(SELECT saga_id::text, step_name, phase, attempt, true, false FROM saga_step "
        "  WHERE next_attempt_at <= clock_timestamp() ORDER BY next_attempt_at LIMIT $1) "
        "UNION ALL "
        "(SELECT saga_id::text, '', 'action', 0, false, true FROM saga_instance "
        "  WHERE status = 'running' AND deadline_at <= clock_timestamp() ORDER BY deadline_at LIMIT $1)",
        limit);
    std::vector<DueTimer> due;
    due.reserve(rows.size());
    for (const auto& row : rows) {
        DueTimer timer;
        timer.saga_id = row[0].as<std::string>();
        timer.step_name = row[1].as<std::string>();
        timer.phase = ParsePhase(row[2].as<std::string>()).value_or(Phase::kAction);
        timer.attempt = row[3].as<int>();
        timer.retry = row[4].as<bool>();
        timer.saga_deadline = row[5].as<bool>();
        due.push_back(std::move(timer));
    }
    return due;
}

std::optional<std::chrono::milliseconds> NextTimer(pqxx::transaction_base& tx) {
    const auto row = tx.exec(
        "SELECT ceil(extract(epoch FROM least("
        "  (SELECT min(deadline_at) FROM saga_step WHERE status = 'dispatched' AND next_attempt_at IS NULL), "
        "  (SELECT min(next_attempt_at) FROM saga_step WHERE next_attempt_at IS NOT NULL), "
        "  (SELECT min(deadline_at) FROM saga_instance WHERE status = 'running' AND deadline_at IS NOT NULL)) "
        "  - clock_timestamp()) "
        "  * 1000)::bigint");
    if (row.at(0)[0].is_null()) return std::nullopt;
    return std::chrono::milliseconds(std::max<std::int64_t>(0, row[0][0].as<std::int64_t>()));
}

}  // namespace sagaflow::detail
