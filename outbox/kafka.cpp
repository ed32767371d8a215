#include "outbox/kafka.hpp"

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

}  // namespace sagaflow::outbox
