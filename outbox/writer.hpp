#pragma once
// The outbox writer: an event enters the `outbox` table inside the caller's transaction, so it
// leaves exactly when the state change that causes it commits (and never if it rolls back).

#include <pqxx/transaction_base>
#include <string>
#include <vector>

#include "outbox/event.hpp"

namespace sagaflow::outbox {

// Inserts `event` for `topic` with record key `key` (the saga id) in `tx`. Mints the event id (UUID
// v7) and time if they are empty. Returns the event id. Enqueueing an id that is already in the
// outbox changes nothing (the first row stands): a resend reuses its row, see Rearm.
std::string Enqueue(pqxx::transaction_base& tx, const std::string& topic, const std::string& key, CloudEvent event);

// The outbox row for `event` as an INSERT statement whose parameters are numbered from `first`
// ($first .. $first+4): a caller writes its own row and the outbox row in ONE statement (one round
// trip), e.g. "WITH step AS (INSERT ... RETURNING 1) " + sql with from = "step" inserts the outbox row
// only if the step row was inserted. Mints the event id and time if they are empty.
struct OutboxRow {
    std::string sql;
    std::vector<std::string> params;
    std::string event_id;
};
OutboxRow MakeOutboxRow(
    const std::string& topic, const std::string& key, CloudEvent event, int first, const std::string& from = "");

// Many outbox rows with one statement: an INSERT of the rows of `relation` (e.g. a CTE over
// unnest(...) of arrays), whose columns event_id (uuid), topic, message_key, headers and payload
// (texts: MakeOutboxRow's params, in that order) and n (the order to take ids in) it reads. The ids
// must be new (minted by MakeOutboxRow): an id already in the outbox fails the statement. `join` (optional) is appended
// after the relation, e.g. "JOIN step ON ..." to insert only rows whose own row was new.
std::string InsertRowsFrom(const std::string& relation, const std::string& join = "");

// Marks the row of `event_id` for publishing again (a step's resend after a timeout): same row,
// same event id, same bytes. The row is due at once (next_attempt_at = now(): the relay's next full
// claim takes it, and the audit measures the resend's delay from then). Returns false if there is
// no such row.
bool Rearm(pqxx::transaction_base& tx, const std::string& event_id);

}  // namespace sagaflow::outbox
