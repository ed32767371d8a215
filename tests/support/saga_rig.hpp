#pragma once
// A test saga over two scripted participants, on a scratch database and topics of its own: what the
// orchestrator's integration and chaos tests share.
//
// The saga `itest-saga` has four steps: reserve (compensatable, participant A), charge
// (compensatable, B), confirm (the pivot, A), notify (retriable, B). Its input item encodes the
// script: "<failAt>/<mode>/<n>", and the default script fails the action named by failAt.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "tests/support/scripted_participant.hpp"
#include "tests/support/services.hpp"

namespace sagaflow::testing {

struct Rig {
    ScratchDatabase db;
    std::string brokers = KafkaBrokers();
    std::string suffix = UniqueName("o");
    std::string pa;  // participant names: lowercase, digits and '-'
    std::string pb;
    std::string replies;

    Rig();
    ~Rig();
    Rig(const Rig&) = delete;
    Rig& operator=(const Rig&) = delete;

    // The definition's YAML, with this rig's participants (and version, notify command type and
    // step timeout: tests that kill engines give failover time before a step times out).
    std::string Yaml(int version = 1,
                     const std::string& notify_type = "Notify.v1",
                     const std::string& timeout = "2s") const;
    // The YAML in a file (for `sagaflow run --saga`), removed with the rig.
    std::string YamlFile(int version = 1, const std::string& timeout = "2s") const;
    EngineConfig Config() const;
    // `sagaflow run` arguments for an engine of this rig running `yaml` (append more).
    std::vector<std::string> RunArgs(const std::string& yaml) const;
    std::unique_ptr<ScriptedParticipant> Participant(Script script) const;
    // Sagas not yet terminal.
    long long Open() const;

  private:
    mutable std::vector<std::string> files_;
};

// Succeed, fail the action named in the item's first field, and reply to `reserve` with a
// reservation the next steps use.
std::vector<ScriptedReply> Default(const ReceivedCommand& command);

// Default, except that the action named after "hold-" in the item ("hold-charge/...") gets no
// answer: that step stays in flight (until its timeout, or a cancel).
std::vector<ScriptedReply> HoldOrDefault(const ReceivedCommand& command);

nlohmann::json Input(const std::string& fail_at, const std::string& mode, int n);

// The step phases of a saga as the participant received them, first deliveries only.
std::vector<std::string> Sequence(const std::vector<ReceivedCommand>& received, const std::string& saga_id);

}  // namespace sagaflow::testing
