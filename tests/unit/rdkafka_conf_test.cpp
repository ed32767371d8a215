#include <doctest/doctest.h>

#include <string>

#include "outbox/detail/rdkafka.hpp"

using sagaflow::outbox::KafkaError;
using namespace sagaflow::outbox::detail;

namespace {
std::string ErrorOf(const sagaflow::outbox::KafkaProperties& properties) {
    try {
        MakeConf(properties);
    } catch (const KafkaError& e) {
        return e.what();
    }
    return {};
}
}  // namespace

TEST_CASE("an unknown Kafka property is refused by name, with a hint") {
    const auto error = ErrorOf({{"bootstrap.servers", "127.0.0.1:1"}, {"no.such.property", "x"}});
    CHECK(error.find("invalid Kafka property 'no.such.property'") != std::string::npos);
    CHECK(error.find("Hint:") != std::string::npos);
}

TEST_CASE("a refused value is never echoed: it may be a secret") {
    const auto error = ErrorOf({{"acks", "s3cr3t-value"}});
    CHECK(error.find("'acks'") != std::string::npos);
    CHECK(error.find("s3cr3t-value") == std::string::npos);
}

TEST_CASE("a valid configuration makes a client, which owns the configuration from then on") {
    auto conf = MakeConf({{"bootstrap.servers", "127.0.0.1:1"}, {"enable.idempotence", "true"}});
    auto client = MakeClient(RD_KAFKA_PRODUCER, std::move(conf));
    CHECK(client != nullptr);
    CHECK(conf == nullptr);
}

TEST_CASE("a client that cannot be created leaves its configuration with the caller and says why") {
    // Idempotence needs acks=all; librdkafka checks the combination in rd_kafka_new, not per key.
    auto conf = MakeConf({{"enable.idempotence", "true"}, {"acks", "1"}});
    std::string error;
    try {
        MakeClient(RD_KAFKA_PRODUCER, std::move(conf));
    } catch (const KafkaError& e) {
        error = e.what();
    }
    CHECK(error.find("cannot create a Kafka producer") != std::string::npos);
    CHECK(error.find("acks") != std::string::npos);
}
