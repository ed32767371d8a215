#include <doctest/doctest.h>

#include <string>

#include "outbox/detail/rdkafka.hpp"
#include "outbox/kafka.hpp"

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

TEST_CASE("Murmur2 is the Java client's (Kafka's own test vectors)") {
    using sagaflow::outbox::Murmur2;
    CHECK(Murmur2("21") == -973932308);
    CHECK(Murmur2("foobar") == -790332482);
    CHECK(Murmur2("a-little-bit-long-string") == -985981536);
    CHECK(Murmur2("a-little-bit-longer-string") == -1486304829);
    CHECK(Murmur2("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971);
    CHECK(Murmur2("abc") == 479470107);
}

TEST_CASE("a producer's configuration hashes keys as the Java client does, unless the properties choose") {
    const auto partitioner = [](const sagaflow::outbox::KafkaProperties& properties) {
        auto conf = MakeProducerConf(properties);
        // librdkafka keeps topic properties of a global configuration in its default topic one.
        rd_kafka_topic_conf_t* topic = rd_kafka_conf_get_default_topic_conf(conf.get());
        REQUIRE(topic != nullptr);
        char value[64];
        std::size_t size = sizeof value;
        REQUIRE(rd_kafka_topic_conf_get(topic, "partitioner", value, &size) == RD_KAFKA_CONF_OK);
        return std::string(value);
    };
    CHECK(partitioner({}) == "murmur2_random");
    CHECK(partitioner({{"partitioner", "consistent"}}) == "consistent");
}
