#pragma once
// A participant whose answers a test scripts: it reads the command topics with its own consumer
// group, records every delivery, and produces the replies the script returns (none, one, or copies)
// to the replies topic. It has no inbox of its own on purpose: a resent command reaches the script
// again (with its delivery count), so tests can see exactly what the engine sent.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace sagaflow::testing {

struct ReceivedCommand {
    std::string topic;
    std::string event_id;
    std::string saga_id;
    std::string step_name;
    std::string phase;
    std::string type;
    nlohmann::json data;
    std::string traceparent, tracestate;  // the CloudEvents tracing extension, when the command has it
    int delivery = 1;                     // how many times this event id arrived so far, this one included
};

struct ScriptedReply {
    std::string outcome = "success";  // success | failure | retry (or anything, to test refusal)
    nlohmann::json data = nlohmann::json::object();
    int copies = 1;        // the same reply record produced this many times (same event id)
    bool new_ids = false;  // copies get distinct event ids (a participant that answers twice)
};

using Script = std::function<std::vector<ScriptedReply>(const ReceivedCommand&)>;

class ScriptedParticipant {
  public:
    ScriptedParticipant(std::string brokers,
                        std::vector<std::string> command_topics,
                        std::string replies_topic,
                        Script script);
    ~ScriptedParticipant();
    ScriptedParticipant(const ScriptedParticipant&) = delete;
    ScriptedParticipant& operator=(const ScriptedParticipant&) = delete;

    std::vector<ReceivedCommand> Received() const;
    std::size_t RepliesSent() const { return replies_sent_.load(); }

  private:
    void Run();

    std::string brokers_;
    std::vector<std::string> topics_;
    std::string replies_topic_;
    Script script_;
    mutable std::mutex mutex_;
    std::vector<ReceivedCommand> received_;
    std::map<std::string, int> deliveries_;
    std::atomic<std::size_t> replies_sent_{0};
    std::atomic<bool> stopping_{false};
    std::atomic<bool> ready_{false};
    std::thread thread_;
};

}  // namespace sagaflow::testing
