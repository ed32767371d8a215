#include <pqxx/pqxx>

#include "core/definition_loader.hpp"
#include "core/saga_machine.hpp"
#include "engine/engine.hpp"
#include "engine/repository/saga_store.hpp"
#include "store/prepared.hpp"

// Reading a saga back (its view: state, steps, timeline; its pinned definition; their JSON and
// graph overlay), and the single-row statements of the services: a step's two clocks, a saga's
// deadline, an idempotency key's saga, the outbox backlog, a definition's row.

namespace sagaflow::detail {
namespace {

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

}  // namespace

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
    view.status = machine::ParseSagaStatus(Text(r[3])).value_or(SagaStatus::kRunning);
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
                              machine::ParsePhase(Text(s[1])).value_or(StepPhase::kAction),
                              machine::ParseStepPhaseStatus(Text(s[2])).value_or(StepPhaseStatus::kFailed),
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
                                            "FROM saga_timeline WHERE saga_id = $1::uuid ORDER BY id, seq",
                                        saga_id)) {
        view.timeline.push_back({Text(e[0]),
                                 Text(e[1]),
                                 Text(e[2]),
                                 machine::ParsePhase(Text(e[3])),
                                 e[4].as<int>(),
                                 Text(e[5]),
                                 Json(e[6])});
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
    overlay.title = "saga " + saga.saga_id + ": " + std::string(machine::ToString(saga.status));
    overlay.saga_status = machine::ToString(saga.status);
    for (const auto& step : saga.steps) {
        overlay.phases[{step.step_name, std::string(machine::ToString(step.phase))}] = machine::ToString(step.status);
    }
    return overlay;
}

nlohmann::json SagaJson(const SagaView& saga) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : saga.steps) {
        steps.push_back({{"step", s.step_name},
                         {"phase", machine::ToString(s.phase)},
                         {"status", machine::ToString(s.status)},
                         {"attempt", s.attempt},
                         {"commandEventId", s.command_event_id},
                         {"reply", s.reply},
                         {"dispatchedAt", s.dispatched_at},
                         {"completedAt", s.completed_at}});
        if (!s.next_attempt_at.empty()) steps.back()["nextAttemptAt"] = s.next_attempt_at;
        if (!s.deadline_at.empty() && s.status == StepPhaseStatus::kDispatched)
            steps.back()["deadlineAt"] = s.deadline_at;
    }
    nlohmann::json timeline = nlohmann::json::array();
    for (const auto& e : saga.timeline) {
        timeline.push_back({{"at", e.at},
                            {"kind", e.kind},
                            {"step", e.step_name},
                            {"phase", e.phase ? machine::ToString(*e.phase) : ""},
                            {"attempt", e.attempt},
                            {"detail", e.detail}});
    }
    nlohmann::json out{{"sagaId", saga.saga_id},
                       {"type", saga.saga_type},
                       {"definitionVersion", saga.definition_version},
                       {"status", machine::ToString(saga.status)},
                       {"parkedReason", saga.parked_reason},
                       {"input", saga.input},
                       {"data", saga.data},
                       {"createdAt", saga.created_at},
                       {"updatedAt", saga.updated_at},
                       {"steps", steps},
                       {"timeline", timeline},
                       {"links", {{"self", "/v1/sagas/" + saga.saga_id}}}};
    if (!saga.idempotency_key.empty()) out["idempotencyKey"] = saga.idempotency_key;
    if (!saga.trace.traceparent.empty()) out["traceparent"] = saga.trace.traceparent;
    if (!saga.trace.tracestate.empty()) out["tracestate"] = saga.trace.tracestate;
    if (!saga.deadline_at.empty()) out["deadlineAt"] = saga.deadline_at;
    return out;
}

std::optional<StepClock> ReadStepClock(pqxx::transaction_base& tx,
                                       const std::string& saga_id,
                                       const std::string& step_name,
                                       const std::string& phase,
                                       int attempt,
                                       std::chrono::milliseconds timeout) {
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
        saga_id,
        step_name,
        phase,
        timeout.count(),
        attempt);
    if (rows.empty()) return std::nullopt;
    const auto& row = rows[0];
    StepClock clock;
    clock.since_dispatch = std::chrono::milliseconds(row[0].as<std::int64_t>());
    clock.overdue = std::chrono::milliseconds(row[1].as<std::int64_t>());
    clock.waiting = row[2].as<bool>();
    clock.published = row[3].as<bool>();
    if (!row[4].is_null()) clock.topic = row[4].as<std::string>();
    if (!row[5].is_null()) clock.partition = row[5].as<int>();
    if (!row[6].is_null()) clock.offset = row[6].as<std::int64_t>();
    if (!row[7].is_null()) clock.published_ago = std::chrono::milliseconds(row[7].as<std::int64_t>());
    return clock;
}

void MoveStepDeadline(pqxx::transaction_base& tx,
                      const std::string& saga_id,
                      const std::string& step_name,
                      const std::string& phase,
                      std::chrono::milliseconds delay,
                      std::chrono::milliseconds timeout,
                      StepHold hold) {
    store::Exec(tx,
                "UPDATE saga_step SET deadline_at = clock_timestamp() + $4 * interval '1 millisecond', "
                "waiting_since = CASE $6::int WHEN 0 THEN coalesce(waiting_since, deadline_at - $5 * "
                "interval '1 millisecond') WHEN 1 THEN waiting_since END, "
                "timeout_due_at = CASE $6::int WHEN 1 THEN coalesce(timeout_due_at, deadline_at) END "
                "WHERE saga_id = $1::uuid AND step_name = $2 AND phase = $3",
                saga_id,
                step_name,
                phase,
                delay.count(),
                timeout.count(),
                static_cast<int>(hold));
}

void ClearSagaDeadline(pqxx::transaction_base& tx, const std::string& saga_id) {
    store::Exec(tx, "UPDATE saga_instance SET deadline_at = NULL WHERE saga_id = $1::uuid", saga_id);
}

KeyedSaga FindByIdempotencyKey(pqxx::transaction_base& tx,
                               const std::string& saga_type,
                               const std::string& key,
                               const std::string& input_json) {
    const auto rows = store::Exec(tx,
                                  "SELECT saga_id::text, input = $3::jsonb FROM saga_instance WHERE saga_type = $1 AND "
                                  "idempotency_key = $2",
                                  saga_type,
                                  key,
                                  input_json);
    return {rows.at(0)[0].as<std::string>(), rows[0][1].as<bool>()};
}

std::int64_t CountOpenSagas(pqxx::transaction_base& tx) {
    return tx.exec1("SELECT count(*) FROM saga_instance WHERE status IN ('running', 'compensating')")[0]
        .as<std::int64_t>();
}

std::pair<long long, double> OutboxBacklog(pqxx::transaction_base& tx) {
    const auto row = tx.exec1(
        "SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8 FROM ("
        "SELECT created_at FROM outbox WHERE published_at IS NULL AND id >= (SELECT low_water FROM outbox_relay WHERE "
        "only_row) "
        "UNION ALL SELECT o.created_at FROM outbox_retry r JOIN outbox o USING (id) WHERE o.published_at IS NULL "
        "AND o.id < (SELECT low_water FROM outbox_relay WHERE only_row)) unpublished");
    return {row[0].as<long long>(), row[1].as<double>()};
}

void WriteDefinition(pqxx::transaction_base& tx, const SagaDefinition& definition, const std::string& source) {
    tx.exec_params(
        "INSERT INTO saga_definition (saga_type, version, hash, canonical, source) VALUES ($1, $2, $3, $4::jsonb, $5) "
        "ON CONFLICT DO NOTHING",
        definition.name,
        definition.version,
        definition.hash,
        definition.Canonical().dump(),
        source);
    const auto row = tx.exec_params(
        "SELECT hash FROM saga_definition WHERE saga_type = $1 AND version = $2", definition.name, definition.version);
    if (!row.empty() && row[0][0].as<std::string>() != definition.hash) {
        throw EngineError("saga '" + definition.name + "' version " + std::to_string(definition.version) +
                          " is already in the database with other content (hash " + row[0][0].as<std::string>() +
                          "). Hint: bump `version:` in the changed file; running sagas keep the version they "
                          "started with");
    }
}

}  // namespace sagaflow::detail
