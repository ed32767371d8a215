#pragma once
// Diagrams of a saga: the forward path, the compensation path in reverse, the pivot marked.

#include <string>

#include "engine/definition.hpp"

namespace sagaflow {

enum class GraphFormat { kMermaid, kDot };

std::string RenderGraph(const SagaDefinition& saga, GraphFormat format);

}  // namespace sagaflow
