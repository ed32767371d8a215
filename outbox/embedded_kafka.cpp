#include "outbox/embedded_kafka.hpp"

// rdkafka_mock.h needs rdkafka.h first.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "outbox/detail/rdkafka.hpp"

namespace sagaflow::outbox {

class EmbeddedKafka::Impl {
  public:
    explicit Impl(int brokers)
        : brokers_count_(brokers),
          host_(detail::MakeClient(RD_KAFKA_PRODUCER, detail::MakeConf({{"log_level", "3"}}))),
          cluster_(rd_kafka_mock_cluster_new(host_.get(), brokers)) {
        if (cluster_ == nullptr) throw KafkaError("cannot start the embedded Kafka (librdkafka mock cluster)");
        brokers_ = rd_kafka_mock_cluster_bootstraps(cluster_);
    }
    ~Impl() { rd_kafka_mock_cluster_destroy(cluster_); }

    void CreateTopics(const std::vector<std::string>& topics, int partitions) {
        for (const auto& topic : topics) {
            const auto err = rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, brokers_count_);
            if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
                throw KafkaError("cannot create topic " + topic + " on the embedded Kafka: " + detail::ErrorText(err));
            }
        }
    }

    int brokers_count_;
    detail::ClientPtr host_;  // the mock cluster lives in this client's threads
    rd_kafka_mock_cluster_t* cluster_;
    std::string brokers_;
};

EmbeddedKafka::EmbeddedKafka(int brokers) : impl_(std::make_unique<Impl>(brokers)) {}
EmbeddedKafka::~EmbeddedKafka() = default;

const std::string& EmbeddedKafka::Brokers() const noexcept {
    return impl_->brokers_;
}

void EmbeddedKafka::CreateTopics(const std::vector<std::string>& topics, int partitions) {
    impl_->CreateTopics(topics, partitions);
}

}  // namespace sagaflow::outbox
