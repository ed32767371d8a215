#include "store/inbox.hpp"

#include <pqxx/pqxx>
#include <stdexcept>

#include "core/saga_id.hpp"
#include "store/prepared.hpp"

namespace sagaflow::store {
namespace {
constexpr const char* kFirstTime = "sagaflow_inbox_first_time";
constexpr const char* kFreshIds = "sagaflow_inbox_fresh_ids";
}  // namespace

void PrepareInbox(pqxx::connection_base& conn) {
    conn.prepare(kFirstTime,
                 "INSERT INTO processed_event (consumer_name, event_id) VALUES ($1, $2::uuid) "
                 "ON CONFLICT DO NOTHING RETURNING 1");
    // Not ON CONFLICT: a speculative insert writes a second WAL record (its confirmation) for every
    // row. The primary key still decides a race with a concurrent delivery (see InboxFreshIds).
    conn.prepare(kFreshIds,
                 "INSERT INTO processed_event (consumer_name, event_id) SELECT $1, id FROM (SELECT DISTINCT "
                 "unnest($2::uuid[]) AS id) u WHERE NOT EXISTS (SELECT FROM processed_event p WHERE "
                 "p.consumer_name = $1 AND p.event_id = u.id) RETURNING event_id::text");
}

bool IsUuid(const std::string& text) {
    return IsUuidText(text);
}

bool InboxFirstTime(pqxx::transaction_base& tx, const std::string& consumer, const std::string& event_id) {
    if (!IsUuid(event_id)) {
        throw std::invalid_argument("event id '" + event_id.substr(0, 64) + "' is not a UUID");
    }
    return !tx.exec_prepared(kFirstTime, consumer, event_id).empty();
}

std::vector<std::string> InboxFreshIds(pqxx::transaction_base& tx,
                                       const std::string& consumer,
                                       const std::vector<std::string>& event_ids) {
    if (event_ids.empty()) return {};
    std::vector<std::string> fresh;
    for (const auto& row : tx.exec_prepared(kFreshIds, consumer, UuidArray(event_ids))) {
        fresh.push_back(row[0].as<std::string>());
    }
    return fresh;
}

}  // namespace sagaflow::store
