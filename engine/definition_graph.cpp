#include "engine/definition_graph.hpp"

#include <sstream>
#include <vector>

namespace sagaflow {
namespace {

// One edge of the saga graph, shared by both renderers so they cannot disagree.
struct Edge {
    std::string from;
    std::string to;
    std::string label;
    bool compensation = false;
};

struct Node {
    std::string id;
    std::string label;  // lines joined by '\n'
    enum class Shape { kTerminal, kStep, kPivot, kCompensation } shape;
};

struct Graph {
    std::vector<Node> nodes;
    std::vector<Edge> edges;
};

Graph BuildGraph(const SagaDefinition& saga) {
    Graph g;
    g.nodes.push_back({"start", "start", Node::Shape::kTerminal});
    for (std::size_t i = 0; i < saga.steps.size(); ++i) {
        const auto& step = saga.steps[i];
        const bool pivot = step.kind == StepKind::kPivot;
        std::string label = step.name + (pivot ? " (pivot)" : step.kind == StepKind::kRetriable ? " (retriable)" : "");
        label += "\n" + step.participant + ": " + step.action.type;
        g.nodes.push_back({"s" + std::to_string(i), label, pivot ? Node::Shape::kPivot : Node::Shape::kStep});
        if (step.compensation) {
            g.nodes.push_back({"c" + std::to_string(i),
                               "undo " + step.name + "\n" + step.participant + ": " + step.compensation->type,
                               Node::Shape::kCompensation});
        }
    }
    g.nodes.push_back({"completed", "completed", Node::Shape::kTerminal});
    g.nodes.push_back({"compensated", "compensated", Node::Shape::kTerminal});

    g.edges.push_back({"start", saga.steps.empty() ? "completed" : "s0", "", false});
    for (std::size_t i = 0; i < saga.steps.size(); ++i) {
        const std::string from = "s" + std::to_string(i);
        g.edges.push_back(
            {from, i + 1 < saga.steps.size() ? "s" + std::to_string(i + 1) : "completed", "success", false});
        if (saga.steps[i].kind == StepKind::kRetriable) {
            continue;  // retried until it succeeds: no failure edge
        }
        // A failure undoes the completed compensatable steps before this one, newest first.
        std::string target = "compensated";
        for (std::size_t k = i; k-- > 0;) {
            if (saga.steps[k].compensation) {
                target = "c" + std::to_string(k);
                break;
            }
        }
        g.edges.push_back({from, target, "failure", true});
        // A step whose outcome stays unknown (timeout after its last attempt) may have taken effect:
        // its own compensation runs first (a null compensation at the participant if it did not).
        if (saga.steps[i].compensation) {
            g.edges.push_back({from, "c" + std::to_string(i), "timeout", true});
        }
    }
    for (std::size_t i = 0; i < saga.steps.size(); ++i) {
        if (!saga.steps[i].compensation) continue;
        std::string target = "compensated";
        for (std::size_t k = i; k-- > 0;) {
            if (saga.steps[k].compensation) {
                target = "c" + std::to_string(k);
                break;
            }
        }
        g.edges.push_back({"c" + std::to_string(i), target, "", true});
    }
    return g;
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
    for (std::size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) {
        text.replace(at, from.size(), to);
    }
    return text;
}

std::string Mermaid(const SagaDefinition& saga, const Graph& g) {
    std::ostringstream out;
    out << "---\ntitle: " << saga.name << " v" << saga.version << "\n---\n";
    out << "flowchart LR\n";
    for (const auto& n : g.nodes) {
        const std::string label = "\"" + Replace(Replace(n.label, "\"", "#quot;"), "\n", "<br/>") + "\"";
        switch (n.shape) {
            case Node::Shape::kTerminal:
                out << "    " << n.id << "([" << label << "])\n";
                break;
            case Node::Shape::kStep:
                out << "    " << n.id << "[" << label << "]\n";
                break;
            case Node::Shape::kPivot:
                out << "    " << n.id << "{{" << label << "}}\n";
                break;
            case Node::Shape::kCompensation:
                out << "    " << n.id << "[/" << label << "/]\n";
                break;
        }
    }
    for (const auto& e : g.edges) {
        out << "    " << e.from << (e.compensation ? " -.->" : " -->");
        if (!e.label.empty()) out << "|" << e.label << "|";
        out << " " << e.to << "\n";
    }
    return out.str();
}

std::string Dot(const SagaDefinition& saga, const Graph& g) {
    std::ostringstream out;
    out << "digraph \"" << saga.name << "\" {\n";
    out << "    label=\"" << saga.name << " v" << saga.version << "\";\n";
    out << "    rankdir=LR;\n    node [shape=box, style=rounded, fontname=\"Helvetica\"];\n";
    out << "    edge [fontname=\"Helvetica\", fontsize=10];\n";
    for (const auto& n : g.nodes) {
        const std::string label = Replace(Replace(n.label, "\"", "\\\""), "\n", "\\n");
        out << "    " << n.id << " [label=\"" << label << "\"";
        switch (n.shape) {
            case Node::Shape::kTerminal:
                out << ", shape=ellipse, style=filled, fillcolor=\"#eeeeee\"";
                break;
            case Node::Shape::kStep:
                break;
            case Node::Shape::kPivot:
                out << ", shape=hexagon, style=bold";
                break;
            case Node::Shape::kCompensation:
                out << ", style=\"rounded,dashed\", color=\"#b03030\"";
                break;
        }
        out << "];\n";
    }
    for (const auto& e : g.edges) {
        out << "    " << e.from << " -> " << e.to;
        std::string attributes;
        if (!e.label.empty()) attributes += "label=\"" + e.label + "\"";
        if (e.compensation)
            attributes += std::string(attributes.empty() ? "" : ", ") + "style=dashed, color=\"#b03030\"";
        if (!attributes.empty()) out << " [" << attributes << "]";
        out << ";\n";
    }
    out << "}\n";
    return out.str();
}

}  // namespace

std::string RenderGraph(const SagaDefinition& saga, GraphFormat format) {
    const Graph g = BuildGraph(saga);
    return format == GraphFormat::kMermaid ? Mermaid(saga, g) : Dot(saga, g);
}

}  // namespace sagaflow
