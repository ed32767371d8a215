#include "tests/support/services.hpp"

#include <librdkafka/rdkafka.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <pqxx/pqxx>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "outbox/detail/rdkafka.hpp"

namespace sagaflow::testing {
namespace {

std::string FromEnvOrFile(const char* env, const char* file, const char* what) {
    if (const char* value = std::getenv(env); value != nullptr && *value != '\0') {
        return value;
    }
    const char* dir = std::getenv("SAGAFLOW_SERVICES_DIR");
    if (dir == nullptr) {
        throw std::runtime_error(std::string("no ") + what + ": neither " + env +
                                 " nor SAGAFLOW_SERVICES_DIR is set. Hint: run the tests through ctest, which starts "
                                 "the private servers, or set " +
                                 env);
    }
    const std::string path = std::string(dir) + "/" + file;
    std::ifstream in(path);
    std::string line;
    if (!in || !std::getline(in, line) || line.empty()) {
        throw std::runtime_error(std::string("no ") + what + ": " + path +
                                 " is missing. Hint: the CTest fixture that starts it failed or did not run; "
                                 "see the output of the services.* tests");
    }
    return line;
}

}  // namespace

std::string PgUrl() {
    return FromEnvOrFile("SAGAFLOW_PG_URL", "pg/url", "PostgreSQL");
}

std::string KafkaBrokers() {
    return FromEnvOrFile("SAGAFLOW_KAFKA_BROKERS", "kafka/brokers", "Kafka broker");
}

std::string UniqueName(std::string_view prefix) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    std::ostringstream out;
    out << prefix << '_' << std::hex << rng();
    return out.str();
}

std::string WithDatabase(const std::string& url, const std::string& database) {
    const auto scheme = url.find("://");
    const auto path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
    if (path == std::string::npos) {
        return url + "/" + database;
    }
    const auto query = url.find('?', path);
    return url.substr(0, path + 1) + database + (query == std::string::npos ? "" : url.substr(query));
}

ScratchDatabase::ScratchDatabase() : name_(UniqueName("t")), url_(WithDatabase(PgUrl(), name_)) {
    pqxx::connection admin{PgUrl()};
    pqxx::nontransaction tx{admin};
    tx.exec("CREATE DATABASE " + tx.quote_name(name_) + " TEMPLATE template0");
}

ScratchDatabase::~ScratchDatabase() {
    try {
        pqxx::connection admin{PgUrl()};
        pqxx::nontransaction tx{admin};
        tx.exec("DROP DATABASE IF EXISTS " + tx.quote_name(name_) + " WITH (FORCE)");
    } catch (...) {  // NOLINT(bugprone-empty-catch): the cluster is thrown away after the run anyway
    }
}

void CreateTopic(const std::string& brokers, const std::string& topic, int partitions) {
    using namespace outbox::detail;
    auto conf = MakeConf({{"bootstrap.servers", brokers}});
    auto client = MakeClient(RD_KAFKA_PRODUCER, std::move(conf));
    std::array<char, 512> errstr{};
    rd_kafka_NewTopic_t* new_topic = rd_kafka_NewTopic_new(topic.c_str(), partitions, 1, errstr.data(), errstr.size());
    if (new_topic == nullptr) {
        throw std::runtime_error("cannot describe topic " + topic + ": " + errstr.data());
    }
    QueuePtr queue{rd_kafka_queue_new(client.get())};
    rd_kafka_CreateTopics(client.get(), &new_topic, 1, nullptr, queue.get());
    rd_kafka_event_t* event = rd_kafka_queue_poll(queue.get(), 30000);
    rd_kafka_NewTopic_destroy(new_topic);
    if (event == nullptr) {
        throw std::runtime_error("creating topic " + topic + " got no answer within 30 s");
    }
    const rd_kafka_CreateTopics_result_t* result = rd_kafka_event_CreateTopics_result(event);
    size_t count = 0;
    const rd_kafka_topic_result_t** results = rd_kafka_CreateTopics_result_topics(result, &count);
    std::string error;
    if (rd_kafka_event_error(event) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        error = rd_kafka_event_error_string(event);
    } else if (count == 1 && rd_kafka_topic_result_error(results[0]) != RD_KAFKA_RESP_ERR_NO_ERROR &&
               rd_kafka_topic_result_error(results[0]) != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
        error = rd_kafka_topic_result_error_string(results[0]);
    }
    rd_kafka_event_destroy(event);
    if (!error.empty()) {
        throw std::runtime_error("creating topic " + topic + " failed: " + error);
    }
    // Wait until every partition has a leader, so the first produce does not race the creation.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
        const rd_kafka_metadata_t* metadata = nullptr;
        rd_kafka_topic_t* handle = rd_kafka_topic_new(client.get(), topic.c_str(), nullptr);
        const bool ok = rd_kafka_metadata(client.get(), 0, handle, &metadata, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR;
        rd_kafka_topic_destroy(handle);
        bool ready = false;
        if (ok && metadata->topic_cnt == 1 && metadata->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
            metadata->topics[0].partition_cnt == partitions) {
            ready = true;
            for (int i = 0; i < metadata->topics[0].partition_cnt; ++i) {
                ready = ready && metadata->topics[0].partitions[i].leader >= 0;
            }
        }
        if (metadata != nullptr) {
            rd_kafka_metadata_destroy(metadata);
        }
        if (ready) {
            return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw std::runtime_error("topic " + topic + " has no leaders 30 s after its creation");
}

}  // namespace sagaflow::testing
