#pragma once
// Replies from participants, inside the consumer's inbox transaction: each reply is checked
// against its saga's step phase and command, decided by the machine and persisted; a reply that
// does not apply is recorded in the timeline as ignored, with why.

#include <map>
#include <optional>
#include <pqxx/transaction>
#include <string>
#include <vector>

#include "engine/orchestrator/orchestration.hpp"
#include "outbox/consumer.hpp"

namespace sagaflow::detail {

class ReplyHandler {
  public:
    explicit ReplyHandler(Orchestration& sagas) : sagas_(sagas) {}

    // The locks and the read of a batch's sagas (kLockAndReadSagasSql), for the consumer to run in
    // its inbox statement (ConsumerOptions::companion): one round trip for all three.
    static std::optional<outbox::InboxCompanion> LockAndReadFor(const std::vector<const outbox::InboundEvent*>& events);

    // A batch of replies: their sagas are locked and loaded with one statement (the inbox statement
    // when `companion` ran, else one here), in saga id order, and their writes go out with one
    // statement at the end (WriteBatch), returned for the consumer to send with the COMMIT. What
    // the world may learn of it goes to `side`, for after the commit.
    outbox::LastWrite OnReplies(pqxx::transaction_base& tx,
                                const std::vector<const outbox::InboundEvent*>& events,
                                const pqxx::result* companion,
                                SideEffects& side);

  private:
    void OnReply(pqxx::transaction_base& tx,
                 const outbox::InboundEvent& in,
                 std::map<std::string, LoadedSaga>& locked,
                 WriteBatch& writes,
                 SideEffects& side);

    Orchestration& sagas_;
};

}  // namespace sagaflow::detail
