#include "outbox/kafka.hpp"

#include <librdkafka/rdkafka.h>

#include <array>

#include "outbox/detail/rdkafka.hpp"

namespace sagaflow::outbox {

KafkaProperties ParseKafkaProperties(const std::vector<std::string>& pairs) {
    KafkaProperties out;
    for (const auto& pair : pairs) {
        const auto eq = pair.find('=');
        if (eq == std::string::npos || eq == 0) {
            throw KafkaError("'" + pair +
                             "' is not a Kafka property. Hint: write KEY=VALUE, e.g. session.timeout.ms=6000");
        }
        out[pair.substr(0, eq)] = pair.substr(eq + 1);
    }
    return out;
}

std::optional<std::string> KafkaPropertyError(const std::string& key, const std::string& value) {
    const detail::ConfPtr conf{rd_kafka_conf_new()};
    std::array<char, 512> errstr{};
    if (rd_kafka_conf_set(conf.get(), key.c_str(), value.c_str(), errstr.data(), errstr.size()) == RD_KAFKA_CONF_OK) {
        return std::nullopt;
    }
    return std::string(errstr.data());
}

}  // namespace sagaflow::outbox
