#include "outbox/writer.hpp"

#include <fmt/format.h>

#include <pqxx/pqxx>

#include "outbox/uuid.hpp"
#include "store/prepared.hpp"

namespace sagaflow::outbox {

OutboxRow MakeOutboxRow(
    const std::string& topic, const std::string& key, CloudEvent event, int first, const std::string& from) {
    // A minted id cannot be in the outbox yet: a plain insert (ON CONFLICT costs a WAL record per row).
    const bool minted = event.id.empty();
    if (minted) event.id = NewUuidV7();
    if (event.time.empty()) event.time = NowRfc3339();
    const nlohmann::json headers{{"content-type", kCloudEventsContentType}};
    OutboxRow row;
    row.sql = fmt::format(
        "INSERT INTO outbox (event_id, topic, message_key, headers, payload) SELECT ${}::uuid, ${}, ${}, ${}::jsonb, "
        "${}::jsonb{}{}",
        first,
        first + 1,
        first + 2,
        first + 3,
        first + 4,
        from.empty() ? "" : " FROM " + from,
        minted ? "" : " ON CONFLICT (event_id) DO NOTHING");
    row.params = {event.id, topic, key, headers.dump(), event.ToJson().dump()};
    row.event_id = event.id;
    return row;
}

std::string InsertRowsFrom(const std::string& relation, const std::string& join) {
    const std::string r = relation;
    return "INSERT INTO outbox (event_id, topic, message_key, headers, payload) SELECT " + r + ".event_id, " + r +
           ".topic, " + r + ".message_key, " + r + ".headers::jsonb, " + r + ".payload::jsonb FROM " + r +
           (join.empty() ? "" : " " + join) + " ORDER BY " + r + ".n";
}

std::string Enqueue(pqxx::transaction_base& tx, const std::string& topic, const std::string& key, CloudEvent event) {
    const OutboxRow row = MakeOutboxRow(topic, key, std::move(event), 1);
    store::ExecTexts(tx, row.sql, row.params);
    return row.event_id;
}

bool Rearm(pqxx::transaction_base& tx, const std::string& event_id) {
    const auto result = store::Exec(
        tx,
        "UPDATE outbox SET published_at = NULL, next_attempt_at = now(), last_error = NULL, kafka_partition = NULL, "
        "kafka_offset = NULL WHERE event_id = $1::uuid",
        event_id);
    return result.affected_rows() == 1;
}

}  // namespace sagaflow::outbox
