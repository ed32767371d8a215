#pragma once
// The inbox (rules R-DIST-IDEM-2): a consumer records each event id it processes in
// `processed_event`, inside the same transaction as the event's effect, and the primary key
// (consumer, event id) decides: of concurrent deliveries of one id exactly one transaction records
// it. InboxFirstTime is `INSERT ... ON CONFLICT DO NOTHING RETURNING`: the others see a duplicate
// (waiting for the first on the key if it has not committed yet). InboxFreshIds, the consumers'
// batch form, inserts the ids no committed row holds (no `ON CONFLICT`: it writes a second WAL
// record per row); a concurrent delivery of one of them makes it throw pqxx::unique_violation, and
// the caller retries, the consumer record by record through InboxFirstTime.

#include <pqxx/connection_base>
#include <pqxx/result>
#include <pqxx/transaction_base>
#include <string>
#include <vector>

#include "store/transaction.hpp"

namespace sagaflow::store {

// Declares the inbox's prepared statements on a connection (the pool does it for its connections).
void PrepareInbox(pqxx::connection_base& conn);

// True the first time `event_id` reaches `consumer`; records it in `tx`. False for a duplicate.
bool InboxFirstTime(pqxx::transaction_base& tx, const std::string& consumer, const std::string& event_id);

// The batch form: records every id in one statement and returns the ids seen for the first time
// (in no particular order). An id repeated inside the batch counts once. Throws
// pqxx::unique_violation (the transaction is then aborted) when a concurrent transaction recorded
// one of the ids after this statement's snapshot.
std::vector<std::string> InboxFreshIds(pqxx::transaction_base& tx,
                                       const std::string& consumer,
                                       const std::vector<std::string>& event_ids);

// InboxFreshIds with a statement of the caller's riding in the same statement, one round trip
// fewer: `companion` is a SELECT whose parameters `$1`, `$2`, ... are `arguments`, e.g. the rows or locks
// the events' handler needs first. It runs in the inbox statement's snapshot. `rows` are its rows,
// each with one more column at the end (the consumer's own); a companion that found nothing still
// gives one row, all NULL but that last column. `settings`, when not empty, is a list of
// `set_config(name, value, true)` calls the statement evaluates once, whatever the companion finds:
// they hold for the rest of the transaction, as SET LOCAL would (a NULL value: the session's default).
struct FreshIdsWith {
    std::vector<std::string> fresh;
    pqxx::result rows;
    bool CompanionEmpty() const { return rows.size() == 1 && rows[0][0].is_null(); }
};
FreshIdsWith InboxFreshIdsWith(pqxx::transaction_base& tx,
                               const std::string& consumer,
                               const std::vector<std::string>& event_ids,
                               const std::string& companion,
                               const std::vector<std::string>& arguments,
                               const std::string& settings = {});

// The two batch statements as a Statement, and their rows read back: for a store::Transaction to
// open with (its BEGIN and the inbox in one round trip). InboxFreshIds and InboxFreshIdsWith run
// these. Both throw std::invalid_argument naming an event id that is not a UUID.
Statement InboxFreshIdsStatement(const std::string& consumer, const std::vector<std::string>& event_ids);
std::vector<std::string> InboxFreshIdsOf(const pqxx::result& rows);
Statement InboxFreshIdsWithStatement(const std::string& consumer,
                                     const std::vector<std::string>& event_ids,
                                     const std::string& companion,
                                     const std::vector<std::string>& arguments,
                                     const std::string& settings = {});
FreshIdsWith InboxFreshIdsWithOf(pqxx::result rows);

// True when `text` is a UUID in canonical text form (what the inbox accepts as an event id).
bool IsUuid(const std::string& text);

}  // namespace sagaflow::store
