#include "tests/support/saga_rig.hpp"

#include <cstdio>
#include <fstream>
#include <regex>

namespace sagaflow::testing {
namespace {

constexpr const char* kSagaYaml = R"(
saga: itest-saga
version: 1
input:
  item: {type: string, required: true}
  failAt: {type: string, default: ""}
  mode: {type: string, default: ""}
defaults:
  timeout: 2s
  retry: {maxAttempts: 3, backoff: {initial: 100ms, max: 400ms, multiplier: 2}, jitter: 0.2}
  compensationRetry: {maxAttempts: 4, backoff: {initial: 100ms, max: 400ms}}
steps:
  - name: reserve
    participant: PA
    kind: compensatable
    command: Reserve.v1
    compensation: Release.v1
    send: {item: $.input.item}
    save: {reservation: $.reply.reservation}
  - name: charge
    participant: PB
    kind: compensatable
    command: Charge.v1
    compensation:
      command: Refund.v1
      send: {reservation: $.data.reservation}
    send: {item: $.input.item, reservation: $.data.reservation}
  - name: confirm
    participant: PA
    kind: pivot
    command: Confirm.v1
    send: {item: $.input.item}
  - name: notify
    participant: PB
    kind: retriable
    command: NOTIFY_TYPE
    send: {item: $.input.item}
)";

}  // namespace

Rig::Rig() : pa("pa-" + suffix.substr(2)), pb("pb-" + suffix.substr(2)), replies("replies-" + suffix.substr(2)) {
    for (const auto& topic : {pa + ".commands", pb + ".commands", replies}) CreateTopic(brokers, topic, 4);
}

Rig::~Rig() {
    for (const auto& file : files_) std::remove(file.c_str());
}

std::string Rig::Yaml(int version, const std::string& notify_type, const std::string& timeout) const {
    std::string yaml = kSagaYaml;
    yaml = std::regex_replace(yaml, std::regex("PA"), pa);
    yaml = std::regex_replace(yaml, std::regex("PB"), pb);
    yaml = std::regex_replace(yaml, std::regex("NOTIFY_TYPE"), notify_type);
    yaml = std::regex_replace(yaml, std::regex("version: 1"), "version: " + std::to_string(version));
    yaml = std::regex_replace(yaml, std::regex("timeout: 2s"), "timeout: " + timeout);
    return yaml;
}

std::string Rig::YamlFile(int version, const std::string& timeout) const {
    const std::string path = "/tmp/sagaflow-" + suffix + "-v" + std::to_string(version) + ".yaml";
    std::ofstream(path) << Yaml(version, "Notify.v1", timeout);
    files_.push_back(path);
    return path;
}

EngineConfig Rig::Config() const {
    EngineConfig config;
    config.database_url = db.Url();
    config.kafka_brokers = brokers;
    config.replies_topic = replies;
    config.consumer_group = "engine-" + suffix;
    config.timer_max_sleep = std::chrono::milliseconds(200);
    return config;
}

std::vector<std::string> Rig::RunArgs(const std::string& yaml) const {
    return {"run",
            "--db",
            db.Url(),
            "--brokers",
            brokers,
            "--saga",
            yaml,
            "--group",
            Config().consumer_group,
            "--replies-topic",
            replies};
}

std::unique_ptr<ScriptedParticipant> Rig::Participant(Script script) const {
    return std::make_unique<ScriptedParticipant>(
        brokers, std::vector<std::string>{pa + ".commands", pb + ".commands"}, replies, std::move(script));
}

long long Rig::Open() const {
    return Count(db.Url(), "SELECT count(*) FROM saga_instance WHERE status IN ('running', 'compensating')");
}

std::vector<ScriptedReply> Default(const ReceivedCommand& command) {
    const std::string item = command.data.value("item", std::string());
    const std::string fail_at = item.substr(0, item.find('/'));
    ScriptedReply reply;
    if (command.phase == "action" && command.step_name == fail_at) reply.outcome = "failure";
    if (command.step_name == "reserve" && command.phase == "action") reply.data = {{"reservation", "r-" + item}};
    return {reply};
}

std::vector<ScriptedReply> HoldOrDefault(const ReceivedCommand& command) {
    const std::string item = command.data.value("item", std::string());
    if (command.phase == "action" && item.rfind("hold-" + command.step_name + "/", 0) == 0) return {};
    return Default(command);
}

nlohmann::json Input(const std::string& fail_at, const std::string& mode, int n) {
    return {{"item", fail_at + "/" + mode + "/" + std::to_string(n)}, {"failAt", fail_at}, {"mode", mode}};
}

std::vector<std::string> Sequence(const std::vector<ReceivedCommand>& received, const std::string& saga_id) {
    std::vector<std::string> out;
    for (const auto& c : received) {
        if (c.saga_id == saga_id && c.delivery == 1) out.push_back(c.step_name + ":" + c.phase);
    }
    return out;
}

}  // namespace sagaflow::testing
