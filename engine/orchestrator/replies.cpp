#include "engine/orchestrator/replies.hpp"

#include <fmt/format.h>

#include <pqxx/pqxx>

#include "core/saga_machine.hpp"
#include "core/text_scan.hpp"
#include "store/inbox.hpp"
#include "store/prepared.hpp"

namespace sagaflow::detail {

namespace {
std::vector<std::string> SagaIdsOf(const std::vector<const outbox::InboundEvent*>& events) {
    std::vector<std::string> ids;
    for (const outbox::InboundEvent* in : events) {
        if (store::IsUuid(in->event.saga_id)) ids.push_back(in->event.saga_id);
    }
    return ids;
}
}  // namespace

std::optional<outbox::InboxCompanion> ReplyHandler::LockAndReadFor(
    const std::vector<const outbox::InboundEvent*>& events) {
    const auto ids = SagaIdsOf(events);
    if (ids.empty()) return std::nullopt;
    return outbox::InboxCompanion{kLockAndReadSagasSql, LockAndReadArguments(ids), {}};
}

// A batch of replies: their sagas are locked and loaded, in saga id order, and their writes go out
// with one statement at the end (WriteBatch), handed to the consumer to send with the COMMIT. The companion locked and
// read every saga of the batch (it was given the duplicates too) inside the inbox statement; without it (a call after
// another in the transaction) they are locked and read here.
outbox::LastWrite ReplyHandler::OnReplies(pqxx::transaction_base& tx,
                                          const std::vector<const outbox::InboundEvent*>& events,
                                          const pqxx::result* companion,
                                          SideEffects& side) {
    auto locked = companion != nullptr ? ReadSagas(*companion) : LockSagas(tx, SagaIdsOf(events), LockMode::kWait);
    WriteBatch writes;
    for (const outbox::InboundEvent* in : events) OnReply(tx, *in, locked, writes, side);
    auto pending = writes.TakeStatement();  // the batch's writes go out with the COMMIT
    side.Latencies(std::move(pending.latencies));
    return std::move(pending.statement);
}

// `locked`: sagas locked and loaded for this reply's batch; taken from it once (a second reply
// of the same saga in the batch reads what the first one wrote, flushed from `writes` first).
void ReplyHandler::OnReply(pqxx::transaction_base& tx,
                           const outbox::InboundEvent& in,
                           std::map<std::string, LoadedSaga>& locked,
                           WriteBatch& writes,
                           SideEffects& side) {
    const outbox::CloudEvent& e = in.event;
    // The outcome as sent: a string, or any other JSON value as its text (recorded, then ignored).
    std::string outcome_text;
    if (const auto it = e.data.is_object() ? e.data.find("outcome") : e.data.end(); it != e.data.end()) {
        outcome_text = it->is_string() ? it->get<std::string>()
                                       : it->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    const auto ignore = [&](const std::string& saga_id, const std::string& why) {
        side.ignored.push_back(fmt::format("reply {} ignored: {}", e.id, why));
        writes.Record(
            saga_id,
            {"ignored", e.step_name, e.phase, 0, e.id, {{"reason", why}, {"type", e.type}, {"outcome", outcome_text}}});
    };
    if (!store::IsUuid(e.saga_id)) return ignore({}, "the reply names no saga (sagaid " + text::Quote(e.saga_id) + ")");
    const auto phase = machine::ParsePhase(e.phase);
    // From here on the reply names a saga: what is wrong with it goes into that saga's timeline.
    if (!phase) return ignore(e.saga_id, "unknown phase " + text::Quote(e.phase));
    machine::Outcome outcome;
    if (outcome_text == "success") {
        outcome = machine::Outcome::kSuccess;
    } else if (outcome_text == "failure") {
        outcome = machine::Outcome::kFailure;
    } else if (outcome_text == "retry") {
        outcome = machine::Outcome::kRetry;
    } else {
        return ignore(e.saga_id, "data.outcome must be success, failure or retry, not " + text::Quote(outcome_text));
    }
    std::optional<LoadedSaga> saga;
    if (const auto it = locked.find(e.saga_id); it != locked.end()) {
        saga = std::move(it->second);
        locked.erase(it);
    } else {
        if (writes.Holds(e.saga_id)) side.Latencies(writes.Flush(tx));
        saga = LockSaga(tx, e.saga_id, LockMode::kWait);
    }
    if (!saga) return ignore({}, "no saga " + e.saga_id);
    const auto definition = sagas_.Definitions().Find(tx, saga->saga_type, saga->definition_hash);
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
    const auto decision = machine::Decide(*definition, saga->state, reply, saga->input);
    if (decision.ignored) return ignore(saga->saga_id, *decision.ignored);
    const auto effects =
        sagas_.Persist(&tx,
                       *definition,
                       *saga,
                       decision,
                       side,
                       {{"reply", e.step_name, e.phase, reply.attempt, e.id, {{"outcome", outcome_text}}}},
                       &writes);
    ++side.replies_applied;
    side.Poke(effects.next_timer);
}

}  // namespace sagaflow::detail
