#pragma once
// Sends a saga event to a topic by hand, as a test plays the engine or a participant.

#include <nlohmann/json.hpp>
#include <string>

#include "outbox/event.hpp"

namespace sagaflow::testing {

// A saga event with a new id and the current time.
outbox::CloudEvent SagaEvent(const std::string& saga_id,
                             const std::string& step_name,
                             const std::string& phase,
                             const std::string& type,
                             nlohmann::json data = nlohmann::json::object(),
                             const std::string& correlation_id = {});

// Produces `event` to `topic`, keyed by its saga id, and waits for the broker's acknowledgement;
// throws naming the topic otherwise.
void SendEvent(const std::string& brokers, const std::string& topic, const outbox::CloudEvent& event);
// Produces `value` as it is (a hand-built record: malformed, nested deep) and waits as SendEvent does.
void SendValue(const std::string& brokers, const std::string& topic, const std::string& key, const std::string& value);

}  // namespace sagaflow::testing
