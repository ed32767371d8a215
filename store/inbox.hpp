#pragma once
// The inbox (rules R-DIST-IDEM-2): a consumer records each event id it processes in
// `processed_event`, inside the same transaction as the event's effect. The insert is
// `INSERT ... ON CONFLICT DO NOTHING RETURNING`, never SELECT-then-INSERT, so concurrent deliveries
// of one id race safely: exactly one transaction gets the row back, the others see a duplicate
// (and, if the first has not committed yet, wait for it on the primary key).

#include <pqxx/connection_base>
#include <pqxx/transaction_base>
#include <string>
#include <vector>

namespace sagaflow::store {

// Declares the inbox's prepared statements on a connection (the pool does it for its connections).
void PrepareInbox(pqxx::connection_base& conn);

// True the first time `event_id` reaches `consumer`; records it in `tx`. False for a duplicate.
bool InboxFirstTime(pqxx::transaction_base& tx, const std::string& consumer, const std::string& event_id);

// The batch form: records every id in one statement and returns the ids seen for the first time
// (in no particular order). An id repeated inside the batch counts once.
std::vector<std::string> InboxFreshIds(pqxx::transaction_base& tx,
                                       const std::string& consumer,
                                       const std::vector<std::string>& event_ids);

// True when `text` is a UUID in canonical text form (what the inbox accepts as an event id).
bool IsUuid(const std::string& text);

}  // namespace sagaflow::store
