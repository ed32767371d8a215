#include "outbox/detail/rdkafka.hpp"

#include <array>
#include <thread>

namespace sagaflow::outbox::detail {

ConfPtr MakeConf(const KafkaProperties& properties) {
    ConfPtr conf{rd_kafka_conf_new()};
    for (const auto& [key, value] : properties) {
        SetProperty(conf.get(), key, value);
    }
    return conf;
}

ConfPtr MakeProducerConf(KafkaProperties properties) {
    properties.try_emplace("partitioner", kKeyPartitioner);
    return MakeConf(properties);
}

std::vector<std::pair<std::string, std::string>> MessageHeaders(const rd_kafka_message_t* message) {
    std::vector<std::pair<std::string, std::string>> out;
    rd_kafka_headers_t* headers = nullptr;
    if (rd_kafka_message_headers(message, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR) return out;
    const char* name = nullptr;
    const void* value = nullptr;
    std::size_t size = 0;
    for (std::size_t i = 0; rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
        out.emplace_back(name, value == nullptr ? std::string() : std::string(static_cast<const char*>(value), size));
    }
    return out;
}

void SetProperty(rd_kafka_conf_t* conf, const std::string& key, const std::string& value) {
    std::array<char, 512> errstr{};
    if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), errstr.data(), errstr.size()) != RD_KAFKA_CONF_OK) {
        // The value is left out on purpose: it may be a SASL password.
        throw KafkaError("invalid Kafka property '" + key + "': " + errstr.data() +
                         ". Hint: see librdkafka's CONFIGURATION.md for the key and its allowed values");
    }
}

ClientPtr MakeClient(rd_kafka_type_t type, ConfPtr conf) {
    std::array<char, 512> errstr{};
    rd_kafka_t* client = rd_kafka_new(type, conf.get(), errstr.data(), errstr.size());
    if (client == nullptr) {
        throw KafkaError(std::string("cannot create a Kafka ") + (type == RD_KAFKA_PRODUCER ? "producer" : "consumer") +
                         ": " + errstr.data() + ". Hint: check the kafka.properties section of the configuration");
    }
    static_cast<void>(conf.release());  // owned by `client` from here on
    return ClientPtr{client};
}

// The RD_KAFKA_V_* macros cast C-style; keep that inside this one function.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
rd_kafka_resp_err_t Produce(rd_kafka_t* producer,
                            const std::string& topic,
                            std::string_view key,
                            std::string_view value,
                            rd_kafka_headers_t* headers,
                            void* opaque) {
    void* payload = const_cast<char*>(value.data());  // copied (RD_KAFKA_MSG_F_COPY), never written
    if (headers != nullptr) {
        return rd_kafka_producev(producer,
                                 RD_KAFKA_V_TOPIC(topic.c_str()),
                                 RD_KAFKA_V_KEY(key.data(), key.size()),
                                 RD_KAFKA_V_VALUE(payload, value.size()),
                                 RD_KAFKA_V_HEADERS(headers),
                                 RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                 RD_KAFKA_V_OPAQUE(opaque),
                                 RD_KAFKA_V_END);
    }
    return rd_kafka_producev(producer,
                             RD_KAFKA_V_TOPIC(topic.c_str()),
                             RD_KAFKA_V_KEY(key.data(), key.size()),
                             RD_KAFKA_V_VALUE(payload, value.size()),
                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                             RD_KAFKA_V_OPAQUE(opaque),
                             RD_KAFKA_V_END);
}
#pragma GCC diagnostic pop

std::string ErrorText(rd_kafka_resp_err_t err) {
    return rd_kafka_err2str(err);
}

std::string FatalError(rd_kafka_t* client) {
    std::array<char, 512> reason{};
    if (rd_kafka_fatal_error(client, reason.data(), reason.size()) == RD_KAFKA_RESP_ERR_NO_ERROR) return {};
    return reason.data();
}

void SleepUnless(const std::atomic<bool>& stopping, std::chrono::milliseconds duration) {
    const auto deadline = std::chrono::steady_clock::now() + duration;
    while (!stopping.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

}  // namespace sagaflow::outbox::detail
