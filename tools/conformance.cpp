#include "tools/conformance.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "outbox/admin.hpp"
#include "outbox/detail/rdkafka.hpp"
#include "outbox/event.hpp"
#include "outbox/kafka.hpp"
#include "outbox/uuid.hpp"

namespace sagaflow {

int ConformanceReport::Count(ConformanceCheck::Result result) const {
    return static_cast<int>(
        std::count_if(checks.begin(), checks.end(), [&](const ConformanceCheck& c) { return c.result == result; }));
}

namespace {

using namespace outbox::detail;
using Result = ConformanceCheck::Result;

struct Seen {
    std::string topic;
    std::string key;
    int partition = 0;
    std::optional<outbox::CloudEvent> event;  // nullopt: not a CloudEvent (`reason` says why)
    std::string reason;
};

// Reads the replies topic and the commands' dead-letter topic from their ends as of Start, on a
// thread of its own: partitions assigned directly, no consumer group.
class Reader {
  public:
    Reader(const ConformanceOptions& options, std::vector<std::string> topics) : topics_(std::move(topics)) {
        auto properties = options.kafka_properties;
        properties["bootstrap.servers"] = options.brokers;
        properties["group.id"] = "sagaflow-conformance-" + outbox::NewUuidV7();
        properties["enable.auto.commit"] = "false";
        consumer_ = MakeClient(RD_KAFKA_CONSUMER, MakeConf(properties));
        rd_kafka_poll_set_consumer(consumer_.get());
        TopicPartitionListPtr assignment{rd_kafka_topic_partition_list_new(8)};
        for (const auto& topic : topics_) {
            const int count = Partitions(topic);
            partitions_[topic] = count;
            for (int p = 0; p < count; ++p) {
                std::int64_t low = 0;
                std::int64_t high = 0;
                rd_kafka_query_watermark_offsets(consumer_.get(), topic.c_str(), p, &low, &high, 10'000);
                rd_kafka_topic_partition_list_add(assignment.get(), topic.c_str(), p)->offset = high;
            }
        }
        rd_kafka_assign(consumer_.get(), assignment.get());
        thread_ = std::thread([this] { Run(); });
    }

    ~Reader() {
        stop_ = true;
        thread_.join();
        rd_kafka_consumer_close(consumer_.get());
    }

    int PartitionsOf(const std::string& topic) const { return partitions_.at(topic); }

    // Waits until the n-th record (from 0, in the order seen) that `pick` accepts has come, or
    // `timeout` passes.
    std::optional<Seen> Await(const std::function<bool(const Seen&)>& pick,
                              std::chrono::seconds timeout,
                              std::size_t n = 0) {
        std::unique_lock lock(mutex_);
        std::optional<Seen> found;
        changed_.wait_for(lock, timeout, [&] {
            std::size_t count = 0;
            for (const auto& seen : seen_) {
                if (pick(seen) && count++ == n) {
                    found = seen;
                    return true;
                }
            }
            return false;
        });
        return found;
    }

    std::vector<Seen> All(const std::function<bool(const Seen&)>& pick) {
        const std::lock_guard lock(mutex_);
        std::vector<Seen> out;
        std::copy_if(seen_.begin(), seen_.end(), std::back_inserter(out), pick);
        return out;
    }

  private:
    int Partitions(const std::string& topic) {
        rd_kafka_topic_t* handle = rd_kafka_topic_new(consumer_.get(), topic.c_str(), nullptr);
        const rd_kafka_metadata_t* metadata = nullptr;
        int count = 0;
        if (rd_kafka_metadata(consumer_.get(), 0, handle, &metadata, 10'000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            metadata->topic_cnt == 1 && metadata->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            count = metadata->topics[0].partition_cnt;
        }
        if (metadata != nullptr) rd_kafka_metadata_destroy(metadata);
        rd_kafka_topic_destroy(handle);
        if (count == 0) throw outbox::KafkaError("topic " + topic + " has no partitions the broker will tell of");
        return count;
    }

    void Run() {
        while (!stop_) {
            MessagePtr message{rd_kafka_consumer_poll(consumer_.get(), 100)};
            if (!message || message->err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
            Seen seen;
            seen.topic = rd_kafka_topic_name(message->rkt);
            if (message->key != nullptr) seen.key.assign(static_cast<const char*>(message->key), message->key_len);
            seen.partition = message->partition;
            outbox::RecordHeaders headers;
            for (auto& [name, value] : MessageHeaders(message.get())) headers[name] = std::move(value);
            const std::string_view value(message->payload == nullptr ? "" : static_cast<const char*>(message->payload),
                                         message->len);
            seen.event = outbox::ParseKafkaRecord(value, headers, seen.reason);
            const std::lock_guard lock(mutex_);
            seen_.push_back(std::move(seen));
            changed_.notify_all();
        }
    }

    std::vector<std::string> topics_;
    std::map<std::string, int> partitions_;
    ClientPtr consumer_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<Seen> seen_;
};

// A command as the engine would send it, kept so it can be sent again byte for byte.
struct Sent {
    std::string saga_id;
    std::string step_name;
    std::string phase;
    std::string id;
    std::string value;
};

class Kit {
  public:
    Kit(const ConformanceOptions& options, const std::function<void(const ConformanceCheck&)>& on_check)
        : options_(options),
          on_check_(on_check),
          commands_(options.participant + ".commands"),
          dead_letters_(commands_ + ".dlq") {
        // The dead-letter topic may not exist before the first dead letter: reading it needs it.
        outbox::EnsureTopicsBlocking(options_.brokers, options_.kafka_properties, {dead_letters_}, 1);
        reader_ = std::make_unique<Reader>(options_, std::vector<std::string>{options_.replies_topic, dead_letters_});
        auto properties = options_.kafka_properties;
        properties["bootstrap.servers"] = options_.brokers;
        properties["enable.idempotence"] = "true";
        producer_ = MakeClient(RD_KAFKA_PRODUCER, MakeProducerConf(properties));
    }

    ConformanceReport Run();

  private:
    static std::string Fill(std::string text, const std::string& saga_id) {
        for (std::size_t at = 0; (at = text.find("{saga}", at)) != std::string::npos; at += saga_id.size()) {
            text.replace(at, 6, saga_id);
        }
        return text;
    }

    Sent Command(const std::string& saga_id,
                 const std::string& phase,
                 const std::string& type,
                 const std::string& data_template) {
        outbox::CloudEvent event;
        event.id = outbox::NewUuidV7();
        event.type = type;
        event.source = "sagaflow/conformance";
        event.time = outbox::NowRfc3339();
        event.saga_id = saga_id;
        event.step_name = "conformance";
        event.phase = phase;
        event.data = nlohmann::json::parse(Fill(data_template, saga_id));
        return {saga_id, event.step_name, phase, event.id, event.ToJson().dump()};
    }

    void Send(const std::string& key, const std::string& value, bool cloud_event = true) {
        HeadersPtr headers{rd_kafka_headers_new(1)};
        if (cloud_event) rd_kafka_header_add(headers.get(), "content-type", -1, outbox::kCloudEventsContentType, -1);
        rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
        while ((err = Produce(producer_.get(), commands_, key, value, headers.get(), nullptr)) ==
               RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(producer_.get(), 100);
        }
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) throw outbox::KafkaError("cannot produce to " + commands_);
        static_cast<void>(headers.release());
        if (rd_kafka_flush(producer_.get(), 30'000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            throw outbox::KafkaError("the broker did not take a command for " + commands_ + " within 30 s");
        }
    }
    void Send(const Sent& command) { Send(command.saga_id, command.value); }

    // The n-th reply (from 0) to `command`'s step phase, within the timeout.
    std::optional<outbox::CloudEvent> Reply(const Sent& command, std::size_t n = 0) {
        const auto seen = reader_->Await(
            [&](const Seen& s) {
                return s.topic == options_.replies_topic && s.event && s.event->saga_id == command.saga_id &&
                       s.event->step_name == command.step_name && s.event->phase == command.phase;
            },
            options_.timeout,
            n);
        if (seen) return seen->event;
        return std::nullopt;
    }

    std::vector<outbox::CloudEvent> Replies(const Sent& command) {
        std::vector<outbox::CloudEvent> out;
        for (const auto& s : reader_->All([&](const Seen& seen) {
                 return seen.topic == options_.replies_topic && seen.event && seen.event->saga_id == command.saga_id &&
                        seen.event->phase == command.phase;
             })) {
            out.push_back(*s.event);
        }
        return out;
    }

    static std::string Outcome(const outbox::CloudEvent& reply) {
        return reply.data.is_object() ? reply.data.value("outcome", std::string("(none)")) : std::string("(none)");
    }

    void Check(std::string name, Result result, std::string detail) {
        report_.checks.push_back({std::move(name), result, std::move(detail)});
        if (on_check_) on_check_(report_.checks.back());
    }

    // Passes when the reply came, answers `command` and has `outcome`.
    bool ExpectOutcome(const std::string& name,
                       const Sent& command,
                       const std::optional<outbox::CloudEvent>& reply,
                       const std::string& outcome) {
        if (!reply) {
            Check(name, Result::kFailed, "no reply within " + std::to_string(options_.timeout.count()) + " s");
            return false;
        }
        if (!reply->correlation_id.empty() && reply->correlation_id != command.id) {
            Check(name,
                  Result::kFailed,
                  "correlationid " + reply->correlation_id + " is not the command's " + command.id);
            return false;
        }
        if (Outcome(*reply) != outcome) {
            Check(name,
                  Result::kFailed,
                  "answered " + Outcome(*reply) + ", expected " + outcome + ": " + reply->data.dump());
            return false;
        }
        Check(name, Result::kPassed, "answered " + outcome + " (reply " + reply->id + ")");
        return true;
    }

    std::optional<Sent> FirstAndResend();
    void Compensation(const Sent& action);
    void DuplicateDelivery();
    void NullCompensationAndLateAction();
    void MalformedRecord();
    void UnknownType();
    void RetryThenResend();
    void Partitioning();

    const ConformanceOptions& options_;
    std::function<void(const ConformanceCheck&)> on_check_;
    std::string commands_;
    std::string dead_letters_;
    std::unique_ptr<Reader> reader_;
    ClientPtr producer_;
    ConformanceReport report_;
};

ConformanceReport Kit::Run() {
    if (const auto first = FirstAndResend()) Compensation(*first);
    DuplicateDelivery();
    NullCompensationAndLateAction();
    MalformedRecord();
    UnknownType();
    RetryThenResend();
    Partitioning();
    return std::move(report_);
}

// A first command, and the same command again once answered (the engine's resend): the stored
// reply, same id. Returns the first command when it was answered with success.
std::optional<Sent> Kit::FirstAndResend() {
    const Sent first = Command(outbox::NewUuidV7(), "action", options_.action_type, options_.action_data);
    Send(first);
    const auto answer = Reply(first);
    if (!ExpectOutcome("first-command", first, answer, "success")) {
        Check("resend-after-answer", Result::kSkipped, "needs first-command");
        Check("compensation", Result::kSkipped, "needs first-command");
        return std::nullopt;
    }
    Send(first);
    const auto again = Reply(first, 1);
    if (!again) {
        Check("resend-after-answer",
              Result::kFailed,
              "no reply to the resend: a participant must answer a command it has seen with the stored reply");
    } else if (again->id != answer->id || again->data != answer->data) {
        Check("resend-after-answer",
              Result::kFailed,
              "the resend got reply " + again->id + " " + again->data.dump() + ", not the stored " + answer->id + " " +
                  answer->data.dump() + " (was the command applied twice?)");
    } else {
        Check("resend-after-answer", Result::kPassed, "the stored reply again, same id " + again->id);
    }
    return first;
}

// The compensation of an applied action runs.
void Kit::Compensation(const Sent& action) {
    const Sent compensation =
        Command(action.saga_id, "compensation", options_.compensation_type, options_.compensation_data);
    Send(compensation);
    ExpectOutcome("compensation", compensation, Reply(compensation), "success");
}

// A duplicate delivery at once (a redelivery before the answer): one reply id, one outcome.
void Kit::DuplicateDelivery() {
    const Sent twice = Command(outbox::NewUuidV7(), "action", options_.action_type, options_.action_data);
    Send(twice);
    Send(twice);
    const auto reply = Reply(twice);
    if (!reply) {
        Check("duplicate-delivery",
              Result::kFailed,
              "no reply within " + std::to_string(options_.timeout.count()) + " s");
        return;
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));  // time for a second, different answer to show
    std::set<std::string> answers;
    for (const auto& r : Replies(twice)) answers.insert(r.id + " " + Outcome(r));
    if (answers.size() == 1 && Outcome(*reply) == "success") {
        Check("duplicate-delivery", Result::kPassed, "one reply id for both deliveries (" + reply->id + ")");
    } else {
        Check("duplicate-delivery",
              Result::kFailed,
              std::to_string(answers.size()) + " different replies (id, outcome) to one command delivered twice");
    }
}

// A compensation before its action is a null compensation; the late action is then refused.
void Kit::NullCompensationAndLateAction() {
    const std::string saga_id = outbox::NewUuidV7();
    const Sent early = Command(saga_id, "compensation", options_.compensation_type, options_.compensation_data);
    Send(early);
    ExpectOutcome("null-compensation", early, Reply(early), "success");
    const Sent late = Command(saga_id, "action", options_.action_type, options_.action_data);
    Send(late);
    ExpectOutcome("late-action-refused", late, Reply(late), "failure");
}

// A record that is no CloudEvent goes to the dead-letter topic, and the participant goes on (the
// checks after this one).
void Kit::MalformedRecord() {
    const std::string key = outbox::NewUuidV7();
    Send(key, "conformance: this record is not a CloudEvent", false);
    const auto letter =
        reader_->Await([&](const Seen& s) { return s.topic == dead_letters_ && s.key == key; }, options_.timeout);
    Check("malformed-record",
          letter ? Result::kPassed : Result::kFailed,
          letter ? "dead-lettered to " + dead_letters_
                 : "not on " + dead_letters_ + " within " + std::to_string(options_.timeout.count()) + " s");
}

// A command type the participant has no handler for is answered with a failure, not dropped.
void Kit::UnknownType() {
    const Sent unknown = Command(outbox::NewUuidV7(), "action", "Conformance.NoSuchCommand.v1", options_.action_data);
    Send(unknown);
    ExpectOutcome("unknown-command-type", unknown, Reply(unknown), "failure");
}

// A retry answer stores nothing: the resend (the same command) runs the handler again.
void Kit::RetryThenResend() {
    if (options_.retry_data.empty()) {
        Check(
            "retry-then-resend", Result::kSkipped, "give --retry-data: an action the participant answers retry first");
        return;
    }
    const Sent retried = Command(outbox::NewUuidV7(), "action", options_.action_type, options_.retry_data);
    Send(retried);
    const auto retry = Reply(retried);
    if (!ExpectOutcome("retry-answer", retried, retry, "retry")) return;
    Send(retried);
    const auto after = Reply(retried, 1);
    if (after && after->id == retry->id) {
        Check("retry-then-resend", Result::kFailed, "the resend got the retry answer again: it was stored");
    } else {
        ExpectOutcome("retry-then-resend", retried, after, "success");
    }
}

// Every reply so far is keyed by its saga id and sits in the partition murmur2 gives that key.
void Kit::Partitioning() {
    const int partitions = reader_->PartitionsOf(options_.replies_topic);
    int replies = 0;
    std::string wrong;
    for (const auto& s : reader_->All([&](const Seen& seen) { return seen.topic == options_.replies_topic; })) {
        if (!s.event) continue;
        ++replies;
        if (s.key != s.event->saga_id) {
            wrong = "reply " + s.event->id + " is keyed '" + s.key + "', not by its saga id";
        } else if (s.partition != outbox::KeyPartition(s.key, partitions)) {
            wrong = "reply " + s.event->id + " is in partition " + std::to_string(s.partition) + ", murmur2 gives " +
                    std::to_string(outbox::KeyPartition(s.key, partitions)) + " (use the Java-compatible partitioner)";
        }
    }
    if (replies == 0) {
        Check("reply-partitioning", Result::kSkipped, "no reply seen");
    } else {
        Check("reply-partitioning",
              wrong.empty() ? Result::kPassed : Result::kFailed,
              wrong.empty() ? std::to_string(replies) + " replies keyed by saga id, partitioned by murmur2" : wrong);
    }
}

}  // namespace

ConformanceReport RunConformance(const ConformanceOptions& options,
                                 const std::function<void(const ConformanceCheck&)>& on_check) {
    return Kit(options, on_check).Run();
}

}  // namespace sagaflow
