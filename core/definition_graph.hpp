#pragma once
// Diagrams of a saga: the forward path, the compensation path in reverse, the pivot marked.

#include <map>
#include <string>
#include <utility>

#include "core/definition.hpp"

namespace sagaflow {

enum class GraphFormat { kMermaid, kDot };

// A saga instance drawn over its definition: each step phase's node is filled by its status
// (succeeded green, failed red, timed_out or cancelled — outcome unknown — orange, dispatched
// amber), the terminal node the saga reached green (completed) or blue (compensated); nodes not
// reached stay white.
struct GraphOverlay {
    std::string title;        // e.g. "saga 0190… compensated"
    std::string saga_status;  // running | compensating | completed | compensated | failed
    std::map<std::pair<std::string, std::string>, std::string> phases;  // (step, action|compensation) -> status
};

std::string RenderGraph(const SagaDefinition& saga, GraphFormat format, const GraphOverlay* overlay = nullptr);

}  // namespace sagaflow
