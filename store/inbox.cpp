#include "store/inbox.hpp"

#include <pqxx/pqxx>
#include <stdexcept>
#include <string_view>

#include "core/saga_id.hpp"
#include "store/prepared.hpp"

namespace sagaflow::store {
namespace {
constexpr const char* kFirstTime = "sagaflow_inbox_first_time";
// Not ON CONFLICT: a speculative insert writes a second WAL record (its confirmation) for every
// row. The primary key still decides a race with a concurrent delivery (see InboxFreshIds). Rows go
// in in id order: two batches that share ids (consumers overlapping in a rebalance) then wait for
// each other in one order only — one waits and loses the race — where in any order each could hold
// an id the other waits for, a deadlock that PostgreSQL breaks only after deadlock_timeout (1 s).
std::string FreshIdsInsert(const std::string& consumer, const std::string& ids) {
    return "INSERT INTO processed_event (consumer_name, event_id) SELECT " + consumer +
           ", id FROM (SELECT DISTINCT unnest(" + ids +
           "::uuid[]) AS id) u WHERE NOT EXISTS (SELECT FROM processed_event p WHERE p.consumer_name = " + consumer +
           " AND p.event_id = u.id) ORDER BY id RETURNING event_id::text";
}

// "{a,b}" of UUIDs (no quoting needed) to its elements.
std::vector<std::string> SplitUuidArray(std::string_view text) {
    std::vector<std::string> out;
    if (text.size() < 2) return out;
    text = text.substr(1, text.size() - 2);
    while (!text.empty()) {
        const auto comma = text.find(',');
        out.emplace_back(text.substr(0, comma));
        if (comma == std::string_view::npos) break;
        text.remove_prefix(comma + 1);
    }
    return out;
}

}  // namespace

void PrepareInbox(pqxx::connection_base& conn) {
    conn.prepare(kFirstTime,
                 "INSERT INTO processed_event (consumer_name, event_id) VALUES ($1, $2::uuid) "
                 "ON CONFLICT DO NOTHING RETURNING 1");
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

Statement InboxFreshIdsStatement(const std::string& consumer, const std::vector<std::string>& event_ids) {
    return {FreshIdsInsert("$1", "$2"), {consumer, UuidArray(event_ids)}};
}

std::vector<std::string> InboxFreshIdsOf(const pqxx::result& rows) {
    std::vector<std::string> fresh;
    fresh.reserve(rows.size());
    for (const auto& row : rows) fresh.push_back(row[0].as<std::string>());
    return fresh;
}

std::vector<std::string> InboxFreshIds(pqxx::transaction_base& tx,
                                       const std::string& consumer,
                                       const std::vector<std::string>& event_ids) {
    if (event_ids.empty()) return {};
    const auto statement = InboxFreshIdsStatement(consumer, event_ids);
    return InboxFreshIdsOf(ExecTexts(tx, statement.sql, statement.params));
}

Statement InboxFreshIdsWithStatement(const std::string& consumer,
                                     const std::vector<std::string>& event_ids,
                                     const std::string& companion,
                                     const std::vector<std::string>& arguments,
                                     const std::string& settings) {
    // The insert is a data-modifying CTE, so it runs to completion whatever the join reads of it;
    // the outer join keeps the fresh ids when the companion finds no row. Prepared once per
    // connection and companion text (store::Exec). The settings are volatile calls in the one-row
    // aggregate's output: PostgreSQL evaluates them once and keeps them although nothing reads them.
    // The companion's parameters come first, as it numbers them; the inbox's follow.
    const std::string consumer_param = "$" + std::to_string(arguments.size() + 1);
    const std::string ids_param = "$" + std::to_string(arguments.size() + 2);
    Statement statement{"WITH fresh AS (" + FreshIdsInsert(consumer_param, ids_param) +
                            " AS id) SELECT c.*, f.ids FROM (SELECT coalesce(array_agg(id), '{}') AS ids" +
                            (settings.empty() ? std::string() : ", " + settings) + " FROM fresh) f LEFT JOIN (" +
                            companion + ") c ON true",
                        arguments};
    statement.params.push_back(consumer);
    statement.params.push_back(UuidArray(event_ids));
    return statement;
}

FreshIdsWith InboxFreshIdsWithOf(pqxx::result rows) {
    FreshIdsWith out;
    out.rows = std::move(rows);
    if (!out.rows.empty()) {
        const pqxx::field ids = out.rows[0][static_cast<pqxx::row::size_type>(out.rows.columns() - 1)];
        out.fresh = SplitUuidArray(std::string_view(ids.c_str(), ids.size()));
    }
    return out;
}

FreshIdsWith InboxFreshIdsWith(pqxx::transaction_base& tx,
                               const std::string& consumer,
                               const std::vector<std::string>& event_ids,
                               const std::string& companion,
                               const std::vector<std::string>& arguments,
                               const std::string& settings) {
    const auto statement = InboxFreshIdsWithStatement(consumer, event_ids, companion, arguments, settings);
    return InboxFreshIdsWithOf(ExecTexts(tx, statement.sql, statement.params));
}

}  // namespace sagaflow::store
