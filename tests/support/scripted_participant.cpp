#include "tests/support/scripted_participant.hpp"

#include <chrono>
#include <stdexcept>

#include "outbox/detail/rdkafka.hpp"
#include "outbox/event.hpp"
#include "outbox/uuid.hpp"
#include "tests/support/services.hpp"

namespace sagaflow::testing {

using namespace outbox::detail;

ScriptedParticipant::ScriptedParticipant(std::string brokers,
                                         std::vector<std::string> command_topics,
                                         std::string replies_topic,
                                         Script script)
    : brokers_(std::move(brokers)),
      topics_(std::move(command_topics)),
      replies_topic_(std::move(replies_topic)),
      script_(std::move(script)) {
    thread_ = std::thread([this] { Run(); });
    // Wait for the group assignment, so no command is produced before the participant listens
    // from the start of the topic (it reads from the earliest offset anyway).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!ready_.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

ScriptedParticipant::~ScriptedParticipant() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
}

std::vector<ReceivedCommand> ScriptedParticipant::Received() const {
    std::lock_guard lock(mutex_);
    return received_;
}

void ScriptedParticipant::Run() {
    auto consumer = MakeClient(RD_KAFKA_CONSUMER,
                               MakeConf({{"bootstrap.servers", brokers_},
                                         {"group.id", UniqueName("participant")},
                                         {"auto.offset.reset", "earliest"},
                                         {"enable.auto.commit", "true"},
                                         {"log_level", "3"}}));
    auto producer = MakeClient(
        RD_KAFKA_PRODUCER,
        MakeProducerConf(
            {{"bootstrap.servers", brokers_}, {"enable.idempotence", "true"}, {"linger.ms", "2"}, {"log_level", "3"}}));
    rd_kafka_poll_set_consumer(consumer.get());
    TopicPartitionListPtr subscription{rd_kafka_topic_partition_list_new(static_cast<int>(topics_.size()))};
    for (const auto& topic : topics_) {
        rd_kafka_topic_partition_list_add(subscription.get(), topic.c_str(), RD_KAFKA_PARTITION_UA);
    }
    rd_kafka_subscribe(consumer.get(), subscription.get());
    while (!stopping_.load()) {
        MessagePtr message{rd_kafka_consumer_poll(consumer.get(), 50)};
        rd_kafka_poll(producer.get(), 0);
        if (!ready_.load()) {
            rd_kafka_topic_partition_list_t* assigned = nullptr;
            if (rd_kafka_assignment(consumer.get(), &assigned) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                if (assigned->cnt > 0) ready_ = true;
                rd_kafka_topic_partition_list_destroy(assigned);
            }
        }
        if (!message || message->err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
        std::string reason;
        const auto event =
            outbox::ParseCloudEvent(std::string_view(static_cast<const char*>(message->payload), message->len), reason);
        if (!event) continue;
        ReceivedCommand command;
        command.topic = rd_kafka_topic_name(message->rkt);
        command.event_id = event->id;
        command.saga_id = event->saga_id;
        command.step_name = event->step_name;
        command.phase = event->phase;
        command.type = event->type;
        command.data = event->data;
        command.traceparent = event->traceparent;
        command.tracestate = event->tracestate;
        {
            std::lock_guard lock(mutex_);
            command.delivery = ++deliveries_[event->id];
            received_.push_back(command);
        }
        for (const auto& reply : script_(command)) {
            outbox::CloudEvent out;
            out.id = outbox::NewUuidV7();
            out.type = command.type + ".reply";
            out.source = "scripted-participant";
            out.time = outbox::NowRfc3339();
            out.saga_id = command.saga_id;
            out.step_name = command.step_name;
            out.phase = command.phase;
            out.correlation_id = command.event_id;
            out.data = reply.data;
            out.data["outcome"] = reply.outcome;
            for (int copy = 0; copy < reply.copies; ++copy) {
                if (copy > 0 && reply.new_ids) out.id = outbox::NewUuidV7();
                const std::string value = out.ToJson().dump();
                while (Produce(producer.get(), replies_topic_, command.saga_id, value, nullptr, nullptr) ==
                       RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                    rd_kafka_poll(producer.get(), 10);
                }
                ++replies_sent_;
            }
        }
    }
    rd_kafka_flush(producer.get(), 10'000);
    rd_kafka_consumer_close(consumer.get());
}

}  // namespace sagaflow::testing
