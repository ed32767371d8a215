#include "tests/support/kafka_send.hpp"

#include <stdexcept>

#include "outbox/detail/rdkafka.hpp"
#include "outbox/uuid.hpp"

namespace sagaflow::testing {

outbox::CloudEvent SagaEvent(const std::string& saga_id,
                             const std::string& step_name,
                             const std::string& phase,
                             const std::string& type,
                             nlohmann::json data,
                             const std::string& correlation_id) {
    outbox::CloudEvent e;
    e.id = outbox::NewUuidV7();
    e.type = type;
    e.source = "test";
    e.time = outbox::NowRfc3339();
    e.saga_id = saga_id;
    e.step_name = step_name;
    e.phase = phase;
    e.correlation_id = correlation_id;
    e.data = std::move(data);
    return e;
}

void SendEvent(const std::string& brokers, const std::string& topic, const outbox::CloudEvent& event) {
    SendValue(brokers, topic, event.saga_id, event.ToJson().dump());
}

void SendValue(const std::string& brokers, const std::string& topic, const std::string& key, const std::string& value) {
    using namespace outbox::detail;
    auto producer = MakeClient(
        RD_KAFKA_PRODUCER,
        MakeProducerConf({{"bootstrap.servers", brokers}, {"log_level", "3"}, {"message.max.bytes", "10000000"}}));
    if (Produce(producer.get(), topic, key, value, nullptr, nullptr) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_flush(producer.get(), 10'000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        throw std::runtime_error("could not send a record keyed " + key + " to " + topic);
    }
}

}  // namespace sagaflow::testing
