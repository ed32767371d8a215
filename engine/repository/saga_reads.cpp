#include <pqxx/pqxx>

#include "core/definition_loader.hpp"
#include "engine/repository/saga_store.hpp"

// Reading a saga back: its view (state, steps, timeline), its pinned definition, and their
// presentation as JSON and as a graph overlay.

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

nlohmann::json SagaJson(const SagaView& saga) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : saga.steps) {
        steps.push_back({{"step", s.step_name},
                         {"phase", s.phase},
                         {"status", s.status},
                         {"attempt", s.attempt},
                         {"commandEventId", s.command_event_id},
                         {"reply", s.reply},
                         {"dispatchedAt", s.dispatched_at},
                         {"completedAt", s.completed_at}});
    }
    nlohmann::json timeline = nlohmann::json::array();
    for (const auto& e : saga.timeline) {
        timeline.push_back({{"at", e.at},
                            {"kind", e.kind},
                            {"step", e.step_name},
                            {"phase", e.phase},
                            {"attempt", e.attempt},
                            {"detail", e.detail}});
    }
    nlohmann::json out{{"sagaId", saga.saga_id},
                       {"type", saga.saga_type},
                       {"definitionVersion", saga.definition_version},
                       {"status", saga.status},
                       {"parkedReason", saga.parked_reason},
                       {"input", saga.input},
                       {"data", saga.data},
                       {"createdAt", saga.created_at},
                       {"updatedAt", saga.updated_at},
                       {"steps", steps},
                       {"timeline", timeline},
                       {"links", {{"self", "/v1/sagas/" + saga.saga_id}}}};
    if (!saga.trace.traceparent.empty()) out["traceparent"] = saga.trace.traceparent;
    if (!saga.trace.tracestate.empty()) out["tracestate"] = saga.trace.tracestate;
    if (!saga.deadline_at.empty()) out["deadlineAt"] = saga.deadline_at;
    return out;
}

}  // namespace sagaflow::detail
