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

std::int32_t Murmur2(std::string_view key) {
    constexpr std::uint32_t kM = 0x5bd1e995;
    constexpr int kR = 24;
    const auto length = static_cast<std::uint32_t>(key.size());
    std::uint32_t h = 0x9747b28c ^ length;
    const auto byte = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(key[i])); };
    const std::size_t whole = key.size() / 4 * 4;
    for (std::size_t i = 0; i < whole; i += 4) {
        std::uint32_t k = byte(i) | byte(i + 1) << 8 | byte(i + 2) << 16 | byte(i + 3) << 24;
        k *= kM;
        k ^= k >> kR;
        k *= kM;
        h *= kM;
        h ^= k;
    }
    switch (key.size() % 4) {
        case 3:
            h ^= byte(whole + 2) << 16;
            [[fallthrough]];
        case 2:
            h ^= byte(whole + 1) << 8;
            [[fallthrough]];
        case 1:
            h ^= byte(whole);
            h *= kM;
    }
    h ^= h >> 13;
    h *= kM;
    h ^= h >> 15;
    return static_cast<std::int32_t>(h);
}

int KeyPartition(std::string_view key, int partitions) {
    return static_cast<int>((static_cast<std::uint32_t>(Murmur2(key)) & 0x7fffffffU) %
                            static_cast<std::uint32_t>(partitions));
}

}  // namespace sagaflow::outbox

namespace sagaflow::outbox {

KafkaProperties WithoutConsumerProperties(KafkaProperties properties) {
    // librdkafka 2.0's CONFIGURATION.md, the properties marked C (consumer) only.
    static const char* const kConsumerOnly[] = {"group.id",
                                                "group.instance.id",
                                                "partition.assignment.strategy",
                                                "session.timeout.ms",
                                                "heartbeat.interval.ms",
                                                "group.protocol.type",
                                                "coordinator.query.interval.ms",
                                                "max.poll.interval.ms",
                                                "enable.auto.commit",
                                                "auto.commit.enable",
                                                "auto.commit.interval.ms",
                                                "enable.auto.offset.store",
                                                "queued.min.messages",
                                                "queued.max.messages.kbytes",
                                                "fetch.wait.max.ms",
                                                "fetch.message.max.bytes",
                                                "max.partition.fetch.bytes",
                                                "fetch.max.bytes",
                                                "fetch.min.bytes",
                                                "fetch.error.backoff.ms",
                                                "offset.store.method",
                                                "offset.store.path",
                                                "offset.store.sync.interval.ms",
                                                "isolation.level",
                                                "enable.partition.eof",
                                                "check.crcs",
                                                "auto.offset.reset",
                                                "consume.callback.max.messages"};
    for (const char* key : kConsumerOnly) properties.erase(key);
    return properties;
}

}  // namespace sagaflow::outbox
