#pragma once
// Can version NEW of a saga be deployed while instances of OLD are still running? The engine is
// safe by construction (an instance stays pinned to the definition it started with, by hash), but
// the participants are not: their handlers are redeployed for NEW, and OLD's instances keep
// sending OLD's commands to them. This compares two definitions of one saga and classifies each
// change for those in-flight instances:
//
//   safe                 nothing an OLD instance sends or needs changes (steps added, reordered,
//                        a compensation added, a step's kind or the pivot moved, a dependency added
//                        or removed, a branch split or joined, a condition added, changed or removed:
//                        OLD's instances keep OLD's shape);
//   needs-both-handlers  OLD's instances still send something NEW does not (a removed step, a
//                        renamed command or compensation type, a removed compensation, a step moved
//                        to another participant): the participant must keep the old handler until
//                        they have finished;
//   unsafe               a handler written for NEW breaks on OLD's commands: NEW sends a field
//                        under the same command type that OLD's commands lack, or NEW no longer
//                        reads a reply field that OLD saves and then sends to a participant.
//
// Pure: no I/O (`sagaflow upgrade-check OLD NEW [--db URL]` adds the in-flight counts).

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/definition.hpp"

namespace sagaflow::upgrade {

enum class Verdict { kSafe, kNeedsBothHandlers, kUnsafe };
std::string_view ToString(Verdict verdict) noexcept;

struct Change {
    std::string kind;  // step-added, step-removed, step-renamed, steps-reordered, participant-changed,
                       // command-renamed, compensation-renamed, compensation-removed, compensation-added,
                       // kind-changed, pivot-moved, send-field-added, send-field-removed, saved-field-dropped,
                       // dependency-added, dependency-removed, branch-split, branch-joined,
                       // made-conditional, condition-changed, condition-removed
    std::string step;  // the step (OLD's name), empty for saga-wide changes
    Verdict verdict = Verdict::kSafe;
    std::string reason;  // why, and what to do
};

struct Report {
    std::string saga;
    int old_version = 0, new_version = 0;
    std::string old_hash, new_hash;
    std::vector<Change> changes;

    Verdict Worst() const;
    nlohmann::json Json() const;
    std::string Text() const;
};

// Every change of NEW against OLD (same saga name expected; the caller checks).
Report Compare(const SagaDefinition& old_definition, const SagaDefinition& new_definition);

// The handlers an OLD instance whose current step is `current_step` may still need: the current
// step's action (unless it is compensating), and, before the point of no return, the compensations
// of the steps up to it, newest first ("participant: Type").
std::vector<std::string> HandlersNeeded(const SagaDefinition& definition, std::size_t current_step, bool compensating);

}  // namespace sagaflow::upgrade
