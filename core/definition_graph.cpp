#include "core/definition_graph.hpp"

#include <map>
#include <sstream>
#include <vector>

#include "core/step_graph.hpp"

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

// The graph of a saga whose steps branch or have conditions: forward edges from each step to the
// steps that wait for it; a failure's edges to the compensations of its nearest compensatable
// ancestors (those run first; the others follow them, as the compensations' own edges show).
Graph BuildBranchedGraph(const SagaDefinition& saga, const StepGraph& order) {
    Graph g;
    const std::size_t n = saga.steps.size();
    const auto id = [](char kind, std::size_t i) { return std::string(1, kind) + std::to_string(i); };
    g.nodes.push_back({"start", "start", Node::Shape::kTerminal});
    for (std::size_t i = 0; i < n; ++i) {
        const auto& step = saga.steps[i];
        const bool pivot = step.kind == StepKind::kPivot;
        std::string label = step.name + (pivot ? " (pivot)" : step.kind == StepKind::kRetriable ? " (retriable)" : "");
        label += "\n" + step.participant + ": " + step.action.type;
        if (step.when) label += "\nwhen " + Describe(*step.when);
        g.nodes.push_back({id('s', i), label, pivot ? Node::Shape::kPivot : Node::Shape::kStep, {step.name, "action"}});
        if (step.compensation) {
            g.nodes.push_back({id('c', i),
                               "undo " + step.name + "\n" + step.participant + ": " + step.compensation->type,
                               Node::Shape::kCompensation,
                               {step.name, "compensation"}});
        }
    }
    g.nodes.push_back({"completed", "completed", Node::Shape::kTerminal});
    g.nodes.push_back({"compensated", "compensated", Node::Shape::kTerminal});
    // The compensatable steps that ran before i with no other such step between them and i, and,
    // for a failure of i, those that may run beside it (stopped and undone with it).
    const auto nearest_undo = [&](std::size_t i, bool beside) {
        std::vector<std::string> targets;
        for (std::size_t a = 0; a < n; ++a) {
            if (!saga.steps[a].compensation) continue;
            if (beside && order.Concurrent(a, i)) {
                targets.push_back(id('c', a));
                continue;
            }
            if (!order.Before(a, i)) continue;
            bool covered = false;
            for (std::size_t b = 0; b < n && !covered; ++b) {
                covered = b != a && saga.steps[b].compensation && order.Before(a, b) && order.Before(b, i);
            }
            if (!covered) targets.push_back(id('c', a));
        }
        if (targets.empty()) targets.push_back("compensated");
        return targets;
    };
    for (std::size_t i = 0; i < n; ++i) {
        if (order.Parents(i).empty()) g.edges.push_back({"start", id('s', i), "", false});
    }
    for (std::size_t i = 0; i < n; ++i) {
        for (const auto child : order.Children(i)) g.edges.push_back({id('s', i), id('s', child), "success", false});
        if (order.Children(i).empty()) g.edges.push_back({id('s', i), "completed", "success", false});
        if (saga.steps[i].kind == StepKind::kRetriable) continue;
        for (const auto& target : nearest_undo(i, true)) g.edges.push_back({id('s', i), target, "failure", true});
        if (saga.steps[i].compensation) g.edges.push_back({id('s', i), id('c', i), "timeout or cancel", true});
    }
    for (std::size_t i = 0; i < n; ++i) {
        if (!saga.steps[i].compensation) continue;
        for (const auto& target : nearest_undo(i, false)) g.edges.push_back({id('c', i), target, "", true});
    }
    return g;
}

Graph BuildGraph(const SagaDefinition& saga) {
    const StepGraph order(saga);
    const bool conditional =
        std::any_of(saga.steps.begin(), saga.steps.end(), [](const auto& step) { return step.when.has_value(); });
    if (!order.Linear() || conditional) return BuildBranchedGraph(saga, order);
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
    if (status == "skipped") return {"#eeeeee", "#757575"};
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

std::string Xml(const std::string& text) {
    std::string out;
    for (const char c : text) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

// The SVG layout: the forward path on the top row (start, the steps, completed), each step's
// compensation under it on the bottom row, `compensated` under `start`. Every edge of the graph is
// drawn; forward ones solid, the ones into a compensation dashed red.
std::string Svg(const SagaDefinition& saga, const Graph& g, const GraphOverlay* overlay) {
    constexpr int kColumn = 210, kWidth = 180, kHeight = 54, kTop = 50, kBottom = 190, kMargin = 15;
    struct Box {
        int x = 0, y = 0;
    };
    std::map<std::string, Box> at;
    const StepGraph order(saga);
    const bool branched = !order.Linear() || std::any_of(saga.steps.begin(), saga.steps.end(), [](const auto& step) {
        return step.when.has_value();
    });
    // Branched: a column per depth (the longest way from the start), the steps of one depth one
    // under another, and the compensations in the same columns below every step.
    std::vector<int> depth(saga.steps.size(), 1);
    std::vector<int> row(saga.steps.size(), 0);
    int columns = static_cast<int>(saga.steps.size());
    int rows = 1;
    if (branched) {
        std::map<int, int> used;
        for (const auto i : order.Order()) {
            for (const auto p : order.Parents(i)) depth[i] = std::max(depth[i], depth[p] + 1);
            row[i] = used[depth[i]]++;
            rows = std::max(rows, row[i] + 1);
        }
        columns = *std::max_element(depth.begin(), depth.end());
    }
    constexpr int kRow = 80;
    const int bottom = branched ? kTop + rows * kRow + 30 : kBottom;
    for (const auto& n : g.nodes) {
        if (branched) {
            if (n.id == "start") {
                at[n.id] = {kMargin, kTop};
            } else if (n.id == "compensated") {
                at[n.id] = {kMargin, bottom};
            } else if (n.id == "completed") {
                at[n.id] = {kMargin + (columns + 1) * kColumn, kTop};
            } else {
                const auto i = static_cast<std::size_t>(std::stoi(n.id.substr(1)));
                at[n.id] = {kMargin + depth[i] * kColumn, (n.id[0] == 's' ? kTop : bottom) + row[i] * kRow};
            }
            continue;
        }
        if (n.id == "start") {
            at[n.id] = {kMargin, kTop};
        } else if (n.id == "compensated") {
            at[n.id] = {kMargin, kBottom};
        } else if (n.id == "completed") {
            at[n.id] = {kMargin + static_cast<int>(saga.steps.size() + 1) * kColumn, kTop};
        } else {  // s<i> or c<i>: step i's column
            const int column = std::stoi(n.id.substr(1)) + 1;
            at[n.id] = {kMargin + column * kColumn, n.id[0] == 's' ? kTop : kBottom};
        }
    }
    const int width = kMargin * 2 + (columns + 1) * kColumn + kWidth;
    const int height = bottom + (branched ? (rows - 1) * kRow : 0) + kHeight + 60;
    std::ostringstream out;
    out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
        << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
    out << "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" "
           "markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0L10,5L0,10z\" fill=\"#555\"/></marker>"
           "<marker id=\"arrow-undo\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" "
           "markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0L10,5L0,10z\" fill=\"#b03030\"/></marker>"
           "</defs>\n";
    out << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
    out << "<text x=\"" << kMargin << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">"
        << Xml(saga.name + " v" + std::to_string(saga.version) + (overlay ? " — " + overlay->title : ""))
        << "</text>\n";
    for (const auto& e : g.edges) {
        const auto from = at[e.from];
        const auto to = at[e.to];
        int x1 = 0, y1 = 0, x2 = 0, y2 = 0;
        if (branched) {  // from the side that faces the target
            if (to.x > from.x) {
                x1 = from.x + kWidth, x2 = to.x, y1 = from.y + kHeight / 2, y2 = to.y + kHeight / 2;
            } else if (to.x < from.x) {
                x1 = from.x, x2 = to.x + kWidth, y1 = from.y + kHeight / 2, y2 = to.y + kHeight / 2;
            } else {  // down the gap left of the column, past the boxes in it
                const int gap = from.x - 8 - ((from.y - kTop) / kRow) * 5;
                const int ya = from.y + kHeight / 2, yb = to.y + kHeight / 2;
                out << "<polyline points=\"" << from.x << "," << ya << " " << gap << "," << ya << " " << gap << ","
                    << yb << " " << to.x << "," << yb << "\" fill=\"none\" stroke=\"#b03030\" "
                    << "stroke-dasharray=\"6 4\" marker-end=\"url(#arrow-undo)\" stroke-width=\"1.5\"><title>"
                    << Xml(e.from + " → " + e.to + (e.label.empty() ? "" : ": " + e.label)) << "</title></polyline>\n";
                continue;
            }
        } else if (from.y == to.y) {  // along a row: forward to the right, compensations to the left
            const bool right = to.x > from.x;
            x1 = right ? from.x + kWidth : from.x;
            x2 = right ? to.x : to.x + kWidth;
            y1 = y2 = from.y + kHeight / 2;
        } else if (from.x == to.x) {  // a step into its own compensation
            x1 = x2 = from.x + kWidth / 2;
            y1 = from.y + kHeight;
            y2 = to.y;
        } else {  // a failure into an earlier compensation (or compensated)
            x1 = from.x + kWidth / 4;
            y1 = from.y + kHeight;
            x2 = to.x + kWidth - kWidth / 4;
            y2 = to.y;
        }
        out << "<line x1=\"" << x1 << "\" y1=\"" << y1 << "\" x2=\"" << x2 << "\" y2=\"" << y2 << "\" stroke=\""
            << (e.compensation ? "#b03030\" stroke-dasharray=\"6 4\" marker-end=\"url(#arrow-undo)\""
                               : "#555\" marker-end=\"url(#arrow)\"")
            << " stroke-width=\"1.5\"><title>" << Xml(e.from + " → " + e.to + (e.label.empty() ? "" : ": " + e.label))
            << "</title></line>\n";
    }
    for (const auto& n : g.nodes) {
        const auto box = at[n.id];
        auto [fill, stroke] = n.status.empty() ? std::pair{"#ffffff", "#9e9e9e"} : Colours(n.status);
        if (!overlay && n.shape != Node::Shape::kTerminal) fill = "#ffffff", stroke = "#555555";
        if (!overlay && n.shape == Node::Shape::kTerminal) fill = "#eeeeee", stroke = "#555555";
        out << "<g class=\"node\" data-node=\"" << Xml(n.id) << "\" data-status=\"" << Xml(n.status) << "\">";
        const std::string paint = std::string("fill=\"") + fill + "\" stroke=\"" + stroke + "\" stroke-width=\"" +
                                  (n.shape == Node::Shape::kPivot ? "3" : "1.5") + "\"" +
                                  (n.shape == Node::Shape::kCompensation ? " stroke-dasharray=\"5 3\"" : "");
        if (n.shape == Node::Shape::kPivot) {
            const int x = box.x, y = box.y, w = kWidth, h = kHeight;
            out << "<polygon points=\"" << x + 14 << "," << y << " " << x + w - 14 << "," << y << " " << x + w << ","
                << y + h / 2 << " " << x + w - 14 << "," << y + h << " " << x + 14 << "," << y + h << " " << x << ","
                << y + h / 2 << "\" " << paint << "/>";
        } else {
            const int radius = n.shape == Node::Shape::kTerminal ? kHeight / 2 : 8;
            out << "<rect x=\"" << box.x << "\" y=\"" << box.y << "\" width=\"" << kWidth << "\" height=\"" << kHeight
                << "\" rx=\"" << radius << "\" " << paint << "/>";
        }
        std::vector<std::string> lines;
        std::istringstream label(n.label);
        for (std::string line; std::getline(label, line);) lines.push_back(line);
        const int first = box.y + kHeight / 2 + 5 - static_cast<int>(lines.size() - 1) * 8;
        for (auto& line : lines) {  // a long condition is cut; the node's title has it whole
            if (line.size() > 30) line = line.substr(0, 28) + "…";
        }
        for (std::size_t i = 0; i < lines.size(); ++i) {
            out << "<text x=\"" << box.x + kWidth / 2 << "\" y=\"" << first + static_cast<int>(i) * 16
                << "\" text-anchor=\"middle\" font-size=\"" << (i == 0 ? 13 : 11) << "\""
                << (i == 0 ? "" : " fill=\"#444\"") << ">" << Xml(lines[i]) << "</text>";
        }
        if (n.shape != Node::Shape::kTerminal && (!n.status.empty() || n.label.size() > 80)) {
            out << "<title>" << Xml(n.status.empty() ? n.label : n.status) << "</title>";
        }
        out << "</g>\n";
    }
    // The legend: what the colours mean.
    int x = kMargin;
    const int y = bottom + (branched ? (rows - 1) * kRow : 0) + kHeight + 30;
    std::vector<std::pair<std::string, std::string>> legend{{"succeeded", "succeeded"},
                                                            {"dispatched", "in flight"},
                                                            {"failed", "failed"},
                                                            {"timed_out", "outcome unknown"},
                                                            {"compensated", "compensated"}};
    if (branched) legend.emplace_back("skipped", "skipped");
    for (const auto& [status, text] : legend) {
        const auto [fill, stroke] = Colours(status);
        out << "<rect x=\"" << x << "\" y=\"" << y - 11 << "\" width=\"14\" height=\"14\" rx=\"3\" fill=\"" << fill
            << "\" stroke=\"" << stroke << "\"/><text x=\"" << x + 20 << "\" y=\"" << y << "\" font-size=\"12\">"
            << Xml(text) << "</text>\n";
        x += 30 + static_cast<int>(text.size()) * 7;
    }
    out << "<text x=\"" << x + 10 << "\" y=\"" << y
        << "\" font-size=\"12\" fill=\"#b03030\">- - → compensation path</text>\n";
    out << "</svg>\n";
    return out.str();
}

}  // namespace

std::string RenderGraph(const SagaDefinition& saga, GraphFormat format, const GraphOverlay* overlay) {
    Graph g = BuildGraph(saga);
    if (overlay) Apply(*overlay, g);
    switch (format) {
        case GraphFormat::kMermaid:
            return Mermaid(saga, g, overlay);
        case GraphFormat::kDot:
            return Dot(saga, g, overlay);
        case GraphFormat::kSvg:
            return Svg(saga, g, overlay);
    }
    return {};
}

std::optional<GraphFormat> ParseGraphFormat(std::string_view name) {
    if (name == "mermaid") return GraphFormat::kMermaid;
    if (name == "dot") return GraphFormat::kDot;
    if (name == "svg") return GraphFormat::kSvg;
    return std::nullopt;
}

const char* GraphMediaType(GraphFormat format) {
    switch (format) {
        case GraphFormat::kDot:
            return "text/vnd.graphviz; charset=utf-8";
        case GraphFormat::kSvg:
            return "image/svg+xml";
        case GraphFormat::kMermaid:
            break;
    }
    return "text/plain; charset=utf-8";
}

}  // namespace sagaflow
