#pragma once
// Diagrams of a saga: the forward path, the compensation path in reverse, the pivot marked.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/definition.hpp"

namespace sagaflow {

// kSvg: a picture laid out here (no Graphviz needed): the forward path left to right on top, the
// compensations under their steps, running right to left to `compensated`.
enum class GraphFormat { kMermaid, kDot, kSvg };

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

// "mermaid", "dot" or "svg"; nullopt for anything else.
std::optional<GraphFormat> ParseGraphFormat(std::string_view name);
// The media type of a rendered graph (HTTP's Content-Type).
const char* GraphMediaType(GraphFormat format);

}  // namespace sagaflow
