#include "outbox/writer.hpp"

#include <pqxx/pqxx>

#include "outbox/uuid.hpp"
#include "store/prepared.hpp"

namespace sagaflow::outbox {

std::string Enqueue(pqxx::transaction_base& tx, const std::string& topic, const std::string& key, CloudEvent event) {
    if (event.id.empty()) event.id = NewUuidV7();
    if (event.time.empty()) event.time = NowRfc3339();
    const nlohmann::json headers{{"content-type", kCloudEventsContentType}};
    store::Exec(
        tx,
        "INSERT INTO outbox (event_id, topic, message_key, headers, payload) VALUES ($1::uuid, $2, $3, $4::jsonb, "
        "$5::jsonb) ON CONFLICT (event_id) DO NOTHING",
        event.id,
        topic,
        key,
        headers.dump(),
        event.ToJson().dump());
    return event.id;
}

bool Rearm(pqxx::transaction_base& tx, const std::string& event_id) {
    const auto result = store::Exec(
        tx,
        "UPDATE outbox SET published_at = NULL, next_attempt_at = NULL, last_error = NULL WHERE event_id = $1::uuid",
        event_id);
    return result.affected_rows() == 1;
}

}  // namespace sagaflow::outbox
