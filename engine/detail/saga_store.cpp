#include "engine/detail/saga_store.hpp"

#include <fmt/format.h>
#include <deque>

#include <pqxx/pqxx>

#include "outbox/uuid.hpp"
#include "outbox/writer.hpp"
#include "store/prepared.hpp"
#include "store/test_guards.hpp"

namespace sagaflow::detail {

using machine::Phase;
using machine::StepStatus;

std::optional<Phase> ParsePhase(std::string_view text) {
    if (text == "action") return Phase::kAction;
    if (text == "compensation") return Phase::kCompensation;
    return std::nullopt;
}

namespace {

std::optional<machine::SagaStatus> ParseSagaStatus(std::string_view text) {
    using machine::SagaStatus;
    for (const auto status : {SagaStatus::kRunning,
                              SagaStatus::kCompensating,
                              SagaStatus::kCompleted,
                              SagaStatus::kCompensated,
                              SagaStatus::kFailed}) {
        if (machine::ToString(status) == text) return status;
    }
    return std::nullopt;
}

// saga_step.status <-> (StepStatus, outcome_unknown): an action that never answered is 'timed_out'.
std::string StepStatusText(const machine::StepPhaseState& phase) {
    switch (phase.status) {
        case StepStatus::kDispatched:
            return "dispatched";
        case StepStatus::kSucceeded:
            return "succeeded";
        case StepStatus::kFailed:
            return phase.outcome_unknown ? "timed_out" : "failed";
    }
    return "failed";
}

void ParseStepStatus(std::string_view text, machine::StepPhaseState& phase) {
    phase.outcome_unknown = text == "timed_out";
    phase.status = text == "dispatched"  ? StepStatus::kDispatched
                   : text == "succeeded" ? StepStatus::kSucceeded
                                         : StepStatus::kFailed;
}

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

// libpqxx 6.4 sends a null const char* as SQL NULL; an empty text stands for "no value" here.
const char* Nullable(const std::string& text) {
    return text.empty() ? nullptr : text.c_str();
}

void Earliest(Effects& effects, std::chrono::milliseconds delay) {
    if (!effects.next_timer || delay < *effects.next_timer) effects.next_timer = delay;
}

}  // namespace

std::map<std::string, LoadedSaga> LockSagas(pqxx::transaction_base& tx,
                                            const std::vector<std::string>& saga_ids,
                                            LockMode mode) {
    std::map<std::string, LoadedSaga> sagas;
    if (saga_ids.empty()) return sagas;
    const std::string ids = store::UuidArray(saga_ids);
    // Locked in key order, so two engines locking overlapping batches cannot deadlock. The steps
    // are read by a second statement: one joined to the locking one would see them as of before a
    // lock wait.
    const std::string lock = mode == LockMode::kWait ? " FOR UPDATE" : " FOR UPDATE SKIP LOCKED";
    const auto rows =
        store::Exec(tx,
                    "SELECT saga_id::text, saga_type, definition_hash, status, current_step, input::text, "
                    "data::text, coalesce(parked_reason, '') FROM saga_instance WHERE saga_id = "
                    "ANY($1::uuid[]) ORDER BY saga_instance.saga_id" +
                        lock,
                    ids);
    if (rows.empty()) return sagas;
    for (const auto& row : rows) {
        LoadedSaga saga;
        saga.saga_id = row[0].as<std::string>();
        saga.saga_type = row[1].as<std::string>();
        saga.definition_hash = row[2].as<std::string>();
        const auto status = ParseSagaStatus(row[3].as<std::string>());
        if (!status) throw std::runtime_error("saga " + saga.saga_id + " has an unknown status " + row[3].c_str());
        saga.state.status = *status;
        saga.state.current_step = row[4].as<std::size_t>();
        saga.input = ParseJson(row[5]);
        saga.state.data = ParseJson(row[6]);
        saga.state.parked_reason = row[7].as<std::string>();
        sagas.emplace(saga.saga_id, std::move(saga));
    }
    const auto steps = store::Exec(tx,
                                   "SELECT saga_id::text, step_name, phase, status, attempt, reply::text, "
                                   "next_attempt_at IS NOT NULL, command_event_id::text FROM saga_step WHERE saga_id = "
                                   "ANY($1::uuid[]) ORDER BY saga_step.saga_id, dispatched_at, phase",
                                   ids);
    for (const auto& row : steps) {
        const auto it = sagas.find(row[0].as<std::string>());
        if (it == sagas.end()) continue;  // skipped: another transaction holds it (kSkipLocked)
        LoadedSaga& saga = it->second;
        machine::StepPhaseState phase;
        phase.step_name = row[1].as<std::string>();
        phase.phase = ParsePhase(row[2].as<std::string>()).value_or(Phase::kAction);
        ParseStepStatus(row[3].as<std::string>(), phase);
        phase.attempt = row[4].as<int>();
        phase.reply = ParseJson(row[5]);
        phase.awaiting_retry = row[6].as<bool>();
        saga.command_ids[{phase.step_name, row[2].as<std::string>()}] = row[7].as<std::string>();
        saga.state.phases.push_back(std::move(phase));
    }
    return sagas;
}

std::optional<LoadedSaga> LockSaga(pqxx::transaction_base& tx, const std::string& saga_id, LockMode mode) {
    auto sagas = LockSagas(tx, {saga_id}, mode);
    if (sagas.empty()) return std::nullopt;
    return std::move(sagas.begin()->second);
}

namespace {

// The timeline rows as one multi-row INSERT whose parameters follow the `params` already there (7
// per row; libpqxx 6.4 binds a null const char* as NULL). `texts` keeps the converted values alive.
std::string TimelineInsert(const std::string& saga_id,
                           const std::vector<TimelineRow>& rows,
                           std::deque<std::string>& texts,
                           std::vector<const char*>& params) {
    std::string sql = "INSERT INTO saga_event (saga_id, kind, step_name, phase, attempt, event_id, detail) VALUES ";
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        const std::size_t base = params.size();
        sql += fmt::format("{}(${}::uuid, ${}, ${}, ${}, ${}::int, ${}::uuid, ${}::jsonb)",
                           i == 0 ? "" : ", ",
                           base + 1,
                           base + 2,
                           base + 3,
                           base + 4,
                           base + 5,
                           base + 6,
                           base + 7);
        const std::string& attempt = texts.emplace_back(r.attempt > 0 ? std::to_string(r.attempt) : std::string());
        const std::string& detail = texts.emplace_back(r.detail.is_null() ? std::string("{}") : r.detail.dump());
        params.push_back(Nullable(saga_id));
        params.push_back(r.kind.c_str());
        params.push_back(Nullable(r.step_name));
        params.push_back(Nullable(r.phase));
        params.push_back(Nullable(attempt));
        params.push_back(Nullable(r.event_id));
        params.push_back(detail.c_str());
    }
    return sql;
}

}  // namespace

void RecordEvents(pqxx::transaction_base& tx, const std::string& saga_id, const std::vector<TimelineRow>& rows) {
    if (rows.empty()) return;
    std::deque<std::string> texts;
    std::vector<const char*> params;
    const std::string sql = TimelineInsert(saga_id, rows, texts, params);
    store::Exec(tx, sql, pqxx::prepare::make_dynamic_params(params));
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

Effects Persist(pqxx::transaction_base& tx,
                const SagaDefinition& definition,
                const LoadedSaga& saga,
                const machine::Decision& decision,
                const std::string& event_source,
                std::mt19937_64& rng,
                std::vector<TimelineRow> timeline) {
    const machine::SagaState& next = decision.state;
    Effects effects;

    // 1. Step phases that changed (new ones are written by their Dispatch below).
    for (const auto& phase : next.phases) {
        const machine::StepPhaseState* before = saga.state.Find(phase.step_name, phase.phase);
        if (before == nullptr) continue;
        if (before->status == phase.status && before->outcome_unknown == phase.outcome_unknown &&
            before->reply == phase.reply && before->awaiting_retry == phase.awaiting_retry) {
            continue;
        }
        const bool open = phase.status == StepStatus::kDispatched;
        const auto latency = store::Exec(tx,
                                         "UPDATE saga_step SET status = $4, reply = $5::jsonb, "
                                         "completed_at = CASE WHEN $6 THEN NULL ELSE clock_timestamp() END, "
                                         "next_attempt_at = CASE WHEN $7 THEN next_attempt_at END, "
                                         "deadline_at = CASE WHEN $6 AND NOT $7 THEN deadline_at END "
                                         "WHERE saga_id = $1::uuid AND step_name = $2 AND phase = $3 "
                                         "RETURNING extract(epoch FROM clock_timestamp() - dispatched_at)::float8",
                                         saga.saga_id,
                                         phase.step_name,
                                         std::string(machine::ToString(phase.phase)),
                                         StepStatusText(phase),
                                         Nullable(phase.reply.is_null() ? std::string() : phase.reply.dump()),
                                         open,
                                         open && phase.awaiting_retry);
        if (!open && before->status == StepStatus::kDispatched && !latency.empty()) {
            effects.step_latencies.emplace_back(phase.step_name, latency[0][0].as<double>());
        }
    }

    // 2. Commands.
    for (const auto& command : decision.commands) {
        if (const auto* dispatch = std::get_if<machine::Dispatch>(&command)) {
            const StepDefinition* step = definition.FindStep(dispatch->step_name);
            const std::string phase_text(machine::ToString(dispatch->phase));
            const auto timeout_ms = dispatch->timeout.count();
            if (saga.state.Find(dispatch->step_name, dispatch->phase) == nullptr) {
                // A new step phase: its row is the dedup key, its event id is minted once, here.
                const CommandSpec& spec = dispatch->phase == Phase::kAction ? step->action : *step->compensation;
                outbox::CloudEvent event;
                event.id = outbox::NewUuidV7();
                event.type = spec.type;
                event.source = event_source;
                event.saga_id = saga.saga_id;
                event.step_name = step->name;
                event.phase = phase_text;
                event.data = RenderTemplate(spec.send, TemplateContext(saga, next));
                // The step row and, only if it is new, the outbox row: one statement, one round trip.
                const outbox::OutboxRow outbox_row =
                    outbox::MakeOutboxRow(step->CommandTopic(), saga.saga_id, event, 6, "step");
                std::vector<std::string> texts{
                    saga.saga_id, step->name, phase_text, event.id, std::to_string(timeout_ms)};
                texts.insert(texts.end(), outbox_row.params.begin(), outbox_row.params.end());
                const auto inserted = store::ExecTexts(
                    tx,
                    "WITH step AS (INSERT INTO saga_step (saga_id, step_name, phase, status, attempt, "
                    "command_event_id, deadline_at) VALUES ($1::uuid, $2, $3, 'dispatched', 1, $4::uuid, "
                    "clock_timestamp() + $5::bigint * interval '1 millisecond') ON CONFLICT DO NOTHING RETURNING 1) " +
                        outbox_row.sql + " RETURNING 1",
                    texts);
                if (inserted.empty()) continue;  // dispatched before: never twice
                timeline.push_back({"dispatched", step->name, phase_text, 1, event.id, {{"type", spec.type}}});
            } else {
                // A resend: the same row, the same event id, the same bytes.
                const auto row = store::Exec(
                    tx,
                    "UPDATE saga_step SET attempt = $4, next_attempt_at = NULL, "
                    "deadline_at = clock_timestamp() + $5 * interval '1 millisecond' "
                    "WHERE saga_id = $1::uuid AND step_name = $2 AND phase = $3 RETURNING command_event_id::text",
                    saga.saga_id,
                    dispatch->step_name,
                    phase_text,
                    dispatch->attempt,
                    timeout_ms);
                std::string event_id = row.at(0)[0].as<std::string>();
                if (store::GuardDisabled("dispatch-dedup")) {
                    // TEST ONLY: the resend as a new message, the mistake the dedup key exists for.
                    const auto copy =
                        store::Exec(tx, "SELECT topic, payload::text FROM outbox WHERE event_id = $1::uuid", event_id);
                    std::string reason;
                    auto event = outbox::ParseCloudEvent(copy.at(0)[1].c_str(), reason);
                    event->id = outbox::NewUuidV7();
                    event_id = outbox::Enqueue(tx, copy[0][0].as<std::string>(), saga.saga_id, *event);
                } else {
                    outbox::Rearm(tx, event_id);
                }
                timeline.push_back({"resent", dispatch->step_name, phase_text, dispatch->attempt, event_id, {}});
            }
            Earliest(effects, dispatch->timeout);
        } else if (const auto* retry = std::get_if<machine::ScheduleRetry>(&command)) {
            const StepDefinition* step = definition.FindStep(retry->step_name);
            const RetryPolicy& policy = retry->phase == Phase::kAction ? step->retry : definition.compensation_retry;
            const auto delay = WithJitter(retry->delay, policy.jitter, rng);
            const std::string phase_text(machine::ToString(retry->phase));
            store::Exec(tx,
                        "UPDATE saga_step SET deadline_at = NULL, "
                        "next_attempt_at = clock_timestamp() + $4 * interval '1 millisecond' "
                        "WHERE saga_id = $1::uuid AND step_name = $2 AND phase = $3",
                        saga.saga_id,
                        retry->step_name,
                        phase_text,
                        delay.count());
            timeline.push_back(
                {"retry-scheduled", retry->step_name, phase_text, retry->attempt, {}, {{"delayMs", delay.count()}}});
            Earliest(effects, delay);
        } else if (const auto* finish = std::get_if<machine::Finish>(&command)) {
            nlohmann::json detail{{"status", machine::ToString(finish->status)}};
            if (!next.parked_reason.empty()) detail["reason"] = next.parked_reason;
            timeline.push_back({"finished", {}, {}, 0, {}, detail});
            effects.finished = true;
            effects.parked = finish->status == machine::SagaStatus::kFailed;
        }
    }

    // 3. The saga row, and the timeline in the same statement (one round trip).
    std::deque<std::string> texts{
        saga.saga_id, std::string(machine::ToString(next.status)), std::to_string(next.current_step), next.data.dump()};
    std::vector<const char*> params{
        texts[0].c_str(), texts[1].c_str(), texts[2].c_str(), texts[3].c_str(), Nullable(next.parked_reason)};
    const std::string update =
        "UPDATE saga_instance SET status = $2, current_step = $3::int, data = $4::jsonb, parked_reason = $5, "
        "updated_at = clock_timestamp(), version = version + 1 WHERE saga_id = $1::uuid";
    const std::string sql =
        timeline.empty() ? update
                         : "WITH timeline AS (" + TimelineInsert(saga.saga_id, timeline, texts, params) + ") " + update;
    store::Exec(tx, sql, pqxx::prepare::make_dynamic_params(params));
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

std::vector<DueTimer> DueTimers(pqxx::transaction_base& tx, int limit) {
    // Two index-backed halves: deadlines of open phases, and backoffs that elapsed.
    const auto rows = tx.exec_params(
        "(SELECT saga_id::text, step_name, phase, attempt, false FROM saga_step "
        "  WHERE status = 'dispatched' AND next_attempt_at IS NULL AND deadline_at <= clock_timestamp() "
        "  ORDER BY deadline_at LIMIT $1) "
        "UNION ALL "
        "(SELECT saga_id::text, step_name, phase, attempt, true FROM saga_step "
        "  WHERE next_attempt_at <= clock_timestamp() ORDER BY next_attempt_at LIMIT $1)",
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
        due.push_back(std::move(timer));
    }
    return due;
}

std::optional<std::chrono::milliseconds> NextTimer(pqxx::transaction_base& tx) {
    const auto row = tx.exec(
        "SELECT ceil(extract(epoch FROM least("
        "  (SELECT min(deadline_at) FROM saga_step WHERE status = 'dispatched' AND next_attempt_at IS NULL), "
        "  (SELECT min(next_attempt_at) FROM saga_step WHERE next_attempt_at IS NOT NULL)) - clock_timestamp()) "
        "  * 1000)::bigint");
    if (row.at(0)[0].is_null()) return std::nullopt;
    return std::chrono::milliseconds(std::max<std::int64_t>(0, row[0][0].as<std::int64_t>()));
}

}  // namespace sagaflow::detail
