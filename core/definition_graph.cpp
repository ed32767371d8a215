#include "core/definition_graph.hpp"

#include <map>
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
    std::pair<std::string, std::string> phase = {};  // (step, action|compensation); empty for terminals
    std::string status = {};  // with an overlay: the phase's status, or the terminal's when reached
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
        g.nodes.push_back(
            {"s" + std::to_string(i), label, pivot ? Node::Shape::kPivot : Node::Shape::kStep, {step.name, "action"}});
        if (step.compensation) {
            g.nodes.push_back({"c" + std::to_string(i),
                               "undo " + step.name + "\n" + step.participant + ": " + step.compensation->type,
                               Node::Shape::kCompensation,
                               {step.name, "compensation"}});
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
        // A step whose outcome stays unknown (timeout after its last attempt, or cancelled in flight)
        // may have taken effect: its own compensation runs first (a null compensation at the
        // participant if it did not).
        if (saga.steps[i].compensation) {
            g.edges.push_back({from, "c" + std::to_string(i), "timeout or cancel", true});
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

// Marks each node with what the instance did there.
void Apply(const GraphOverlay& overlay, Graph& g) {
    for (auto& n : g.nodes) {
        if (!n.phase.first.empty()) {
            const auto it = overlay.phases.find(n.phase);
            if (it != overlay.phases.end()) n.status = it->second;
        } else if (n.id == "start") {
            n.status = "succeeded";
        } else if (overlay.saga_status == n.id) {
            n.status = n.id;  // the end it reached
        }
    }
}

// Fill and border colours per status.
std::pair<const char*, const char*> Colours(const std::string& status) {
    if (status == "succeeded" || status == "completed") return {"#c8e6c9", "#2e7d32"};
    if (status == "compensated") return {"#bbdefb", "#1565c0"};
    if (status == "failed") return {"#ffcdd2", "#c62828"};
    if (status == "timed_out" || status == "cancelled") return {"#ffe0b2", "#ef6c00"};
    return {"#fff59d", "#f9a825"};  // dispatched: in flight or waiting for its next attempt
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
    for (std::size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) {
        text.replace(at, from.size(), to);
    }
    return text;
}

std::string Mermaid(const SagaDefinition& saga, const Graph& g, const GraphOverlay* overlay) {
    std::ostringstream out;
    out << "---\ntitle: " << saga.name << " v" << saga.version << (overlay ? " — " + overlay->title : "") << "\n---\n";
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
    if (overlay) {
        std::map<std::string, std::string> members;  // status -> "id,id"
        for (const auto& n : g.nodes) {
            if (n.status.empty()) continue;
            auto& list = members[n.status];
            list += (list.empty() ? "" : ",") + n.id;
        }
        for (const auto& [status, ids] : members) {
            const auto [fill, stroke] = Colours(status);
            out << "    classDef " << status << " fill:" << fill << ",stroke:" << stroke << "\n";
            out << "    class " << ids << " " << status << "\n";
        }
    }
    return out.str();
}

std::string Dot(const SagaDefinition& saga, const Graph& g, const GraphOverlay* overlay) {
    std::ostringstream out;
    out << "digraph \"" << saga.name << "\" {\n";
    out << "    label=\"" << saga.name << " v" << saga.version
        << (overlay ? " — " + Replace(overlay->title, "\"", "\\\"") : "") << "\";\n";
    out << "    rankdir=LR;\n    node [shape=box, style=rounded, fontname=\"Helvetica\"];\n";
    out << "    edge [fontname=\"Helvetica\", fontsize=10];\n";
    for (const auto& n : g.nodes) {
        const std::string label = Replace(Replace(n.label, "\"", "\\\""), "\n", "\\n");
        std::string shape, style, fill, colour;
        switch (n.shape) {
            case Node::Shape::kTerminal:
                shape = "ellipse", style = "filled", fill = "#eeeeee";
                break;
            case Node::Shape::kStep:
                style = "rounded";
                break;
            case Node::Shape::kPivot:
                shape = "hexagon", style = "bold";
                break;
            case Node::Shape::kCompensation:
                style = "rounded,dashed", colour = "#b03030";
                break;
        }
        if (overlay) {
            const auto [f, c] = n.status.empty() ? std::pair{"#ffffff", "#9e9e9e"} : Colours(n.status);
            if (style.find("filled") == std::string::npos) style += ",filled";
            fill = f, colour = c;
        }
        out << "    " << n.id << " [label=\"" << label << "\"";
        if (!shape.empty()) out << ", shape=" << shape;
        if (style != "rounded") out << ", style=\"" << style << "\"";
        if (!fill.empty()) out << ", fillcolor=\"" << fill << "\"";
        if (!colour.empty()) out << ", color=\"" << colour << "\"";
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

std::string RenderGraph(const SagaDefinition& saga, GraphFormat format, const GraphOverlay* overlay) {
    Graph g = BuildGraph(saga);
    if (overlay) Apply(*overlay, g);
    return format == GraphFormat::kMermaid ? Mermaid(saga, g, overlay) : Dot(saga, g, overlay);
}

}  // namespace sagaflow
