#pragma once
// The partition the Java Kafka client (and kafkajs's default partitioner) gives a record key:
// murmur2 of the key's bytes, made positive, modulo the partition count. Written from the Java
// client's Utils.murmur2, independently of librdkafka, so a test can check librdkafka against it.

#include <cstdint>
#include <string_view>

namespace sagaflow::testing {

inline std::int32_t Murmur2(std::string_view key) {
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

inline int JavaPartition(std::string_view key, int partitions) {
    return static_cast<int>((static_cast<std::uint32_t>(Murmur2(key)) & 0x7fffffffU) %
                            static_cast<std::uint32_t>(partitions));
}

}  // namespace sagaflow::testing
