#include "engine/orchestrator/saga_commands.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <tuple>

#include "core/saga_machine.hpp"
#include "core/text_scan.hpp"
#include "engine/repository/saga_store.hpp"
#include "outbox/event.hpp"
#include "outbox/uuid.hpp"
#include "store/inbox.hpp"
#include "store/pool.hpp"
#include "store/prepared.hpp"
#include "store/test_guards.hpp"

namespace sagaflow::detail {

namespace {

std::string Text(const pqxx::field& field) {
    return field.is_null() ? std::string() : field.as<std::string>();
}

}  // namespace

StartResult SagaCommands::Start(const std::string& type,
                                nlohmann::json input,
                                const std::string& key,
                                const TraceContext& trace) {
    RequireStarted();
    std::shared_ptr<const SagaDefinition> definition;
    // Refused without a connection: bad input gets its answer while the database is away too.
    if (auto refusal = Refusal(type, input, definition)) return std::move(*refusal);
    PendingStart pending;
    const PlannedStart planned = PlanStart(*definition, type, input, key, trace, pending);
    const StartResult result = RunStart(planned, type, input, key);
    Committed(result, pending);
    return result;
}

// The start's statement on its own, so its transaction is that statement: one round trip. When its
// connection is lost the pool runs the job again on a new one, and the statement may have committed
// before the loss. The run again settles that: its rows hold the same saga id and event ids, so a
// unique violation, or the key's saga being this one, means the first run committed: the saga is
// started, once. (The pool gives up after PoolOptions::max_job_attempts; the caller then cannot
// tell, and a retry with the same key finds the saga if one went in.)
StartResult SagaCommands::RunStart(const PlannedStart& planned,
                                   const std::string& type,
                                   const nlohmann::json& input,
                                   const std::string& key) {
    int runs = 0;
    return sagas_.Pool().RunBlocking([&](pqxx::connection& conn) {
        const bool again = runs++ > 0;
        if (again) spdlog::warn("start of saga {}: its connection was lost; running the start again", planned.saga_id);
        pqxx::nontransaction tx{conn};
        pqxx::result rows;
        try {
            rows = store::ExecTexts(tx, planned.statement.sql, planned.statement.params);
        } catch (const pqxx::unique_violation&) {
            if (!again) throw;
            return Outcome(tx, true, planned, type, input, key);
        }
        if (!again && store::TestFault("start-reply-lost")) {
            // TEST ONLY: the start committed and its answer is lost with the connection.
            conn.disconnect();
            throw pqxx::broken_connection("the connection was lost after the start committed (test fault)");
        }
        return Outcome(tx, WriteBatch::StartedBy(rows), planned, type, input, key);
    });
}

StartResult SagaCommands::StartIn(pqxx::transaction_base& tx,
                                  const SagaDefinition& definition,
                                  const std::string& type,
                                  const nlohmann::json& input,
                                  const std::string& key,
                                  const TraceContext& trace,
                                  PendingStart& pending) {
    const PlannedStart planned = PlanStart(definition, type, input, key, trace, pending);
    const auto rows = store::ExecTexts(tx, planned.statement.sql, planned.statement.params);
    return Outcome(tx, WriteBatch::StartedBy(rows), planned, type, input, key);
}

// A start's database work, before any transaction: the saga row (unless its key started one
// before), its first steps and their commands, as one statement.
SagaCommands::PlannedStart SagaCommands::PlanStart(const SagaDefinition& definition,
                                                   const std::string& type,
                                                   const nlohmann::json& input,
                                                   const std::string& key,
                                                   const TraceContext& trace,
                                                   PendingStart& pending) {
    LoadedSaga saga;
    saga.saga_id = outbox::NewUuidV7();
    saga.saga_type = type;
    saga.definition_hash = definition.hash;
    saga.input = input;
    if (outbox::ValidTraceparent(trace.traceparent)) {
        saga.traceparent = trace.traceparent;
        if (outbox::ValidTracestate(trace.tracestate)) saga.tracestate = trace.tracestate;
    }
    const auto decision = machine::Decide(definition, saga.state, machine::Begin{}, saga.input);
    WriteBatch writes;
    SideEffects none;  // a start finishes no step and parks nothing
    const auto effects = sagas_.Persist(nullptr,
                                        definition,
                                        saga,
                                        decision,
                                        none,
                                        {{"started", {}, {}, 0, {}, {{"version", definition.version}}}},
                                        &writes);
    pending.next_timer = effects.next_timer;
    if (definition.deadline && (!pending.next_timer || *definition.deadline < *pending.next_timer)) {
        pending.next_timer = *definition.deadline;
    }
    return {saga.saga_id,
            writes.StartStatement(
                {type,
                 definition.version,
                 definition.hash,
                 input.dump(),
                 key.empty() ? std::nullopt : std::optional<std::string>(key),
                 saga.traceparent,
                 saga.tracestate,
                 definition.deadline ? std::optional<std::int64_t>(definition.deadline->count()) : std::nullopt})};
}

// What a start's statement did: started the planned saga, or found the key's saga.
StartResult SagaCommands::Outcome(pqxx::transaction_base& tx,
                                  bool started,
                                  const PlannedStart& planned,
                                  const std::string& type,
                                  const nlohmann::json& input,
                                  const std::string& key) {
    StartResult r;
    if (started) {
        r.status = StartResult::Status::kStarted;
        r.saga_id = planned.saga_id;
        return r;
    }
    // The key was used: jsonb equality ignores key order and whitespace, so the same input
    // written differently is still the same command. The key's saga may be this one, from a run
    // of the start whose connection was lost after it committed.
    const auto existing = FindByIdempotencyKey(tx, type, key, input.dump());
    r.saga_id = existing.saga_id;
    if (existing.saga_id == planned.saga_id) {
        r.status = StartResult::Status::kStarted;
    } else if (existing.same_input) {
        r.status = StartResult::Status::kReplayed;
    } else {
        r.status = StartResult::Status::kConflict;
        r.message = "idempotency key '" + key + "' already started saga " + r.saga_id +
                    " with other input. Hint: use a new key for a new request";
    }
    return r;
}

// After the commit of a start: counted, and the timer scan told of the first deadline.
void SagaCommands::Committed(const StartResult& result, const PendingStart& pending) {
    if (result.status != StartResult::Status::kStarted) return;
    ++sagas_.Count().sagas_started;
    sagas_.Poke(pending.next_timer);
}

std::optional<SagaView> SagaCommands::Get(const SagaId& saga_id) {
    return sagas_.Pool().RunBlocking([&](pqxx::connection& conn) {
        pqxx::read_transaction tx{conn};
        return ReadSagaView(tx, saga_id.Text());
    });
}

std::optional<std::string> SagaCommands::Graph(const SagaId& saga_id,
                                               GraphFormat format,
                                               const std::function<bool(const SagaView&)>& may_read) {
    return sagas_.Pool().RunBlocking([&](pqxx::connection& conn) -> std::optional<std::string> {
        pqxx::read_transaction tx{conn};
        const auto view = ReadSagaView(tx, saga_id.Text());
        if (!view || (may_read && !may_read(*view))) return std::nullopt;
        const auto overlay = OverlayOf(*view);
        return RenderGraph(*sagas_.Definitions().Find(tx, view->saga_type, view->definition_hash), format, &overlay);
    });
}

SagaPage SagaCommands::List(const ListQuery& query) {
    RequireStarted();
    const int limit = std::clamp(query.limit, 1, 500);
    const auto range = ListIdRange(query, std::chrono::system_clock::now());
    if (!range) return {};                     // a prefix of no saga id
    std::string keys = query.idempotency_key;  // the stored forms of the key, separated by chr(31)
    if (!keys.empty()) {
        for (const auto& scope : query.key_scopes) keys += '\x1f' + scope + ":" + query.idempotency_key;
    }
    return sagas_.Pool().RunBlocking([&](pqxx::connection& conn) {
        pqxx::read_transaction tx{conn};
        // Planned for the filters given (a rare status has an index of its own), not with the
        // generic plan the engine's sessions keep for their key lookups.
        tx.exec("SET LOCAL plan_cache_mode = force_custom_plan");
        // Keyset paging on the saga id: UUID v7 ids sort by creation time.
        const auto rows = tx.exec_params(ListSagasStatement(),
                                         query.status ? std::string(machine::ToString(*query.status)) : std::string(),
                                         query.saga_type,
                                         store::IsUuid(query.cursor) ? query.cursor : std::string(),
                                         limit + 1,
                                         range->high,
                                         range->low,
                                         keys);
        SagaPage page;
        for (const auto& row : rows) {
            if (static_cast<int>(page.items.size()) == limit) {
                page.next_cursor = page.items.back().saga_id;
                break;
            }
            page.items.push_back({Text(row[0]),
                                  Text(row[1]),
                                  machine::ParseSagaStatus(Text(row[2])).value_or(SagaStatus::kRunning),
                                  Text(row[3]),
                                  Text(row[4]),
                                  Text(row[5])});
        }
        return page;
    });
}

SagaOverview SagaCommands::Overview() {
    RequireStarted();
    return sagas_.Pool().RunBlocking([](pqxx::connection& conn) {
        pqxx::read_transaction tx{conn};
        return ReadOverview(tx);
    });
}

// An operator's action on one saga: `act` runs under the saga's row lock in a transaction it
// commits; Result::Status::kNotFound when there is no saga of that id.
template <typename Result, typename Act>
Result SagaCommands::OnLockedSaga(const SagaId& saga_id, Act act) {
    const Result none = NoSaga<Result>(saga_id.Text());
    return sagas_.Pool().RunBlocking([&](pqxx::connection& conn) {
        pqxx::work tx{conn};
        const auto saga = LockSaga(tx, saga_id.Text(), LockMode::kWait);
        return saga ? act(tx, *saga) : none;
    });
}

RetryResult SagaCommands::Retry(const SagaId& saga_id) {
    const auto result = OnLockedSaga<RetryResult>(saga_id, [&](pqxx::work& tx, const LoadedSaga& saga) {
        RetryResult r;
        if (saga.state.status != machine::SagaStatus::kFailed) {
            r.status = RetryResult::Status::kNotParked;
            r.message = "saga " + saga_id.Text() + " is " + std::string(machine::ToString(saga.state.status)) +
                        "; only a saga parked as failed can be retried";
            return r;
        }
        const std::string step = ReopenParked(tx, saga);
        tx.commit();
        r.message = "step '" + step + "' gets one more attempt now";
        return r;
    });
    if (result.status == RetryResult::Status::kResumed) sagas_.Poke(std::chrono::milliseconds(0));
    return result;
}

SagaCommands::Cancellation SagaCommands::CancelLocked(pqxx::work& tx,
                                                      const SagaDefinition& definition,
                                                      const LoadedSaga& saga,
                                                      const std::string& reason) {
    Cancellation c;
    const auto decision = machine::Decide(definition, saga.state, machine::Cancel{reason}, saga.input);
    c.status = decision.state.status;
    if (decision.ignored) {
        c.refused = *decision.ignored;
        return c;
    }
    // The steps in flight, stopped (the first names the timeline entry; a graph may have several).
    nlohmann::json detail = nlohmann::json::object();
    if (!reason.empty()) detail["reason"] = reason;
    int attempt = 0;
    for (const auto& phase : saga.state.phases) {
        if (phase.phase != machine::Phase::kAction || phase.status != machine::StepStatus::kDispatched) continue;
        if (c.step.empty()) {
            c.step = phase.step_name;
            attempt = phase.attempt;
        } else {
            detail["alsoStopped"].push_back(phase.step_name);
        }
    }
    c.effects =
        sagas_.Persist(&tx, definition, saga, decision, c.side, {{"cancelled", c.step, "action", attempt, {}, detail}});
    return c;
}

// After a cancellation committed.
void SagaCommands::Cancelled(const std::string& saga_id, const std::string& reason) {
    ++sagas_.Count().sagas_cancelled;
    spdlog::info("saga {} cancelled{}", saga_id, reason.empty() ? "" : ": " + text::Quote(reason, 200));
}

CancelResult SagaCommands::Cancel(const SagaId& saga_id, const std::string& reason) {
    Effects effects;
    SideEffects side;
    const auto result = OnLockedSaga<CancelResult>(saga_id, [&](pqxx::work& tx, const LoadedSaga& saga) {
        CancelResult r;
        auto cancellation =
            CancelLocked(tx, *sagas_.Definitions().Find(tx, saga.saga_type, saga.definition_hash), saga, reason);
        r.saga_status = cancellation.status;
        if (!cancellation.refused.empty()) {
            const bool undoing = saga.state.status == machine::SagaStatus::kCompensating ||
                                 saga.state.status == machine::SagaStatus::kCompensated;
            r.status = undoing ? CancelResult::Status::kAlreadyCompensating : CancelResult::Status::kNotCancellable;
            r.message = "saga " + saga_id.Text() + " cannot be cancelled: " + cancellation.refused;
            return r;
        }
        tx.commit();
        effects = std::move(cancellation.effects);
        side = std::move(cancellation.side);
        r.message = "step '" + cancellation.step + "' and the steps before it are being compensated";
        return r;
    });
    if (result.status == CancelResult::Status::kCancelled) {
        sagas_.Apply(std::move(side));
        Cancelled(saga_id.Text(), reason);
        sagas_.Poke(effects.next_timer);
    }
    return result;
}

EngineGauges SagaCommands::Gauges() {
    RequireStarted();
    return sagas_.Pool().RunBlocking([](pqxx::connection& conn) {
        pqxx::read_transaction tx{conn};
        EngineGauges g;
        for (const auto& row : tx.exec(OpenSagasStatement())) {
            g.sagas[{row[0].as<std::string>(), row[1].as<std::string>()}] = row[2].as<long long>();
        }
        std::tie(g.outbox_backlog, g.oldest_unpublished_seconds) = OutboxBacklog(tx);
        return g;
    });
}

namespace {

// The producer's message.max.bytes: set among the Kafka properties, else librdkafka's default.
std::size_t MaxMessageBytes(const EngineConfig& config) {
    const auto it = config.kafka_properties.find("message.max.bytes");
    if (it != config.kafka_properties.end() && text::IsDigits(it->second, 10)) return std::stoull(it->second);
    return 1'000'000;
}

}  // namespace

// The checks of a start before any database work: the type is registered and the input matches
// its schema (`input` gets the defaults). nullopt when both hold; `definition` is then the
// latest version of the type.
std::optional<StartResult> SagaCommands::Refusal(const std::string& type,
                                                 nlohmann::json& input,
                                                 std::shared_ptr<const SagaDefinition>& definition) const {
    definition = sagas_.Definitions().Latest(type);
    StartResult result;
    if (!definition) {
        result.status = StartResult::Status::kUnknownType;
        result.message = "no saga type " + text::Quote(type, 64) + " is registered";
        return result;
    }
    result.errors = ValidateInput(*definition, input);
    if (!result.errors.empty()) {
        result.status = StartResult::Status::kInvalidInput;
        result.message = "the input does not match the input schema of saga '" + type + "'";
        return result;
    }
    result.errors = CheckCommandSizes(*definition, input, MaxMessageBytes(sagas_.Config()));
    if (!result.errors.empty()) {
        result.status = StartResult::Status::kInvalidInput;
        result.message = "the input makes a command of saga '" + type + "' too large for Kafka";
        return result;
    }
    return std::nullopt;
}

}  // namespace sagaflow::detail
