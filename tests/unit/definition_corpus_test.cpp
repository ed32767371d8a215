// Hostile and malformed files never crash or hang the loader: each is refused with positioned
// errors. Every shipped saga loads, and its diagrams are structurally valid.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core/definition_graph.hpp"
#include "core/definition_loader.hpp"

namespace fs = std::filesystem;

namespace {

fs::path SourceDir() {
    const char* dir = std::getenv("SAGAFLOW_SOURCE_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "SAGAFLOW_SOURCE_DIR is not set: run this test through ctest");
    return dir;
}

std::vector<fs::path> FilesIn(const fs::path& dir, const std::string& extension = "") {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir)) {
        if (entry.is_regular_file() && (extension.empty() || entry.path().extension() == extension)) {
            files.push_back(entry.path());
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

// Mermaid flowchart grammar as we emit it: front matter, header, node statements, edge statements,
// class definitions and assignments (an instance's overlay), every edge endpoint and classed node
// declared as a node, every class used defined first.
std::string MermaidProblems(const std::string& text) {
    static const std::regex kNode{
        R"(    ([A-Za-z][A-Za-z0-9_]*)(\(\["[^"]*"\]\)|\["[^"]*"\]|\{\{"[^"]*"\}\}|\[/"[^"]*"/\]))"};
    static const std::regex kEdge{
        R"(    ([A-Za-z][A-Za-z0-9_]*) (-->|-\.->)(\|[A-Za-z ]+\|)? ([A-Za-z][A-Za-z0-9_]*))"};
    static const std::regex kClassDef{R"(    classDef ([a-z_]+) fill:#[0-9a-f]{6},stroke:#[0-9a-f]{6})"};
    static const std::regex kClass{R"(    class ([A-Za-z0-9_,]+) ([a-z_]+))"};
    std::istringstream in(text);
    std::string line;
    std::vector<std::string> lines;
    while (std::getline(in, line)) lines.push_back(line);
    if (lines.size() < 5 || lines[0] != "---" || lines[1].rfind("title: ", 0) != 0 || lines[2] != "---" ||
        lines[3] != "flowchart LR") {
        return "bad header";
    }
    std::set<std::string> nodes;
    std::set<std::string> classes;
    std::vector<std::pair<std::string, std::string>> edges;
    for (std::size_t i = 4; i < lines.size(); ++i) {
        std::smatch m;
        if (std::regex_match(lines[i], m, kNode)) {
            if (!nodes.insert(m[1]).second) return "node declared twice: " + lines[i];
        } else if (std::regex_match(lines[i], m, kEdge)) {
            edges.emplace_back(m[1], m[4]);
        } else if (std::regex_match(lines[i], m, kClassDef)) {
            classes.insert(m[1]);
        } else if (std::regex_match(lines[i], m, kClass)) {
            if (!classes.count(m[2])) return "class used before its classDef: " + lines[i];
            std::istringstream ids(m[1]);
            for (std::string id; std::getline(ids, id, ',');) {
                if (!nodes.count(id)) return "class of an undeclared node: " + id;
            }
        } else {
            return "not a node or edge statement: " + lines[i];
        }
    }
    for (const auto& [from, to] : edges) {
        if (!nodes.count(from) || !nodes.count(to)) return "edge to an undeclared node: " + from + " -> " + to;
    }
    return edges.empty() ? "no edges" : "";
}

}  // namespace

TEST_CASE("every malformed file in the corpus is refused with positioned errors") {
    const auto files = FilesIn(SourceDir() / "tests/corpus/definitions");
    CHECK(files.size() >= 30);
    for (const auto& file : files) {
        CAPTURE(file);
        const auto result = sagaflow::LoadDefinitionFile(file);
        CHECK_FALSE(result.definition.has_value());
        REQUIRE_FALSE(result.diagnostics.empty());
        // A file may say what it is refused for: "# expect: <part of the message>" on its first line.
        std::ifstream in(file, std::ios::binary);
        std::string first;
        std::getline(in, first);
        if (first.rfind("# expect: ", 0) == 0) {
            const std::string expected = first.substr(10);
            const bool said = std::any_of(result.diagnostics.begin(), result.diagnostics.end(), [&](const auto& d) {
                return d.message.find(expected) != std::string::npos;
            });
            CHECK_MESSAGE(said, "no diagnostic says: " << expected);
            CHECK(result.diagnostics.size() == 1);  // one mistake, one error
        }
        for (const auto& d : result.diagnostics) {
            CHECK(d.file == file.string());
            CHECK_FALSE(d.message.empty());
            // Only whole-file problems (empty file) have no position.
            if (d.line == 0) CHECK(d.message.find("empty") != std::string::npos);
        }
    }
}

TEST_CASE("a 50 MB file is refused by its size without being read") {
    const fs::path big = fs::temp_directory_path() / ("sagaflow-big-" + std::to_string(::getpid()) + ".yaml");
    {
        std::ofstream out(big, std::ios::binary);
        const std::string chunk = "saga: x\nversion: 1\n" + std::string(1 << 20, '#') + "\n";
        for (int i = 0; i < 50; ++i) out << chunk;
    }
    const auto result = sagaflow::LoadDefinitionFile(big);
    fs::remove(big);
    REQUIRE(result.diagnostics.size() == 1);
    CHECK(result.diagnostics[0].message.rfind("the file is 52429800 bytes", 0) == 0);
}

TEST_CASE("an unreadable path is a diagnostic, not an exception") {
    const auto result = sagaflow::LoadDefinitionFile("/nonexistent/saga.yaml");
    REQUIRE(result.diagnostics.size() == 1);
    CHECK(result.diagnostics[0].message.rfind("cannot read the file", 0) == 0);
}

TEST_CASE("every saga under sagas/ loads and draws a valid Mermaid diagram") {
    const auto files = FilesIn(SourceDir() / "sagas", ".yaml");
    REQUIRE(files.size() >= 2);
    for (const auto& file : files) {
        CAPTURE(file);
        const auto result = sagaflow::LoadDefinitionFile(file);
        for (const auto& d : result.diagnostics) FAIL(d.ToString());
        REQUIRE(result.definition);
        const std::string mermaid = sagaflow::RenderGraph(*result.definition, sagaflow::GraphFormat::kMermaid);
        CHECK(MermaidProblems(mermaid) == "");
        // Every step and every compensation appears, the pivot as a hexagon.
        for (std::size_t i = 0; i < result.definition->steps.size(); ++i) {
            const auto& step = result.definition->steps[i];
            CHECK(mermaid.find(step.name) != std::string::npos);
            if (step.compensation) CHECK(mermaid.find(step.compensation->type) != std::string::npos);
            if (step.kind == sagaflow::StepKind::kPivot) {
                CHECK(mermaid.find("s" + std::to_string(i) + "{{") != std::string::npos);
            }
        }
    }
}

TEST_CASE("an instance's diagram colours each phase by its status and stays valid Mermaid and DOT") {
    const auto result = sagaflow::LoadDefinitionFile(SourceDir() / "sagas/order-payment.yaml");
    REQUIRE(result.definition);
    sagaflow::GraphOverlay overlay;
    overlay.title = "saga x: compensating";
    overlay.saga_status = "compensating";
    overlay.phases = {{{"create-order", "action"}, "succeeded"},
                      {{"charge-payment", "action"}, "cancelled"},
                      {{"charge-payment", "compensation"}, "dispatched"}};
    const std::string mermaid = sagaflow::RenderGraph(*result.definition, sagaflow::GraphFormat::kMermaid, &overlay);
    CHECK(MermaidProblems(mermaid) == "");
    CHECK(mermaid.find("title: order-payment v1 — saga x: compensating\n") != std::string::npos);
    CHECK(mermaid.find("    class start,s0 succeeded\n") != std::string::npos);
    CHECK(mermaid.find("    class s1 cancelled\n") != std::string::npos);
    CHECK(mermaid.find("    class c1 dispatched\n") != std::string::npos);
    CHECK(mermaid.find("compensated compensated") == std::string::npos);  // not reached yet
    const std::string dot = sagaflow::RenderGraph(*result.definition, sagaflow::GraphFormat::kDot, &overlay);
    CHECK(
        dot.find("    c1 [label=\"undo charge-payment\\npayment: RefundPayment.v1\", style=\"rounded,dashed,filled\", "
                 "fillcolor=\"#fff59d\", color=\"#f9a825\"];") != std::string::npos);
    CHECK(dot.find("    s2 [label=\"approve-order (retriable)\\norder: ApproveOrder.v1\", style=\"rounded,filled\", "
                   "fillcolor=\"#ffffff\", color=\"#9e9e9e\"];") != std::string::npos);
    // Without an overlay the diagram of the definition has no classes.
    CHECK(sagaflow::RenderGraph(*result.definition, sagaflow::GraphFormat::kMermaid).find("class") ==
          std::string::npos);
}

TEST_CASE("the SVG diagram places every phase, colours it by status and escapes every label") {
    const auto result = sagaflow::LoadDefinitionFile(SourceDir() / "sagas/order-payment.yaml");
    REQUIRE(result.definition);
    sagaflow::GraphOverlay overlay;
    overlay.title = "saga <x> & \"y\"";
    overlay.saga_status = "compensated";
    overlay.phases = {{{"create-order", "action"}, "succeeded"},
                      {{"charge-payment", "action"}, "failed"},
                      {{"create-order", "compensation"}, "succeeded"}};
    const std::string svg = sagaflow::RenderGraph(*result.definition, sagaflow::GraphFormat::kSvg, &overlay);
    CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
    CHECK(svg.find("order-payment v1 — saga &lt;x&gt; &amp; &quot;y&quot;") != std::string::npos);
    CHECK(svg.find("<x>") == std::string::npos);
    CHECK(svg.find("data-node=\"s0\" data-status=\"succeeded\"><rect") != std::string::npos);
    CHECK(svg.find("data-node=\"s1\" data-status=\"failed\"><polygon") == std::string::npos);  // not the pivot
    CHECK(svg.find("data-node=\"s1\" data-status=\"failed\"><rect") != std::string::npos);
    CHECK(svg.find("fill=\"#ffcdd2\" stroke=\"#c62828\"") != std::string::npos);  // failed: red
    CHECK(svg.find("data-node=\"compensated\" data-status=\"compensated\"") != std::string::npos);
    CHECK(svg.find("data-node=\"completed\" data-status=\"\"") != std::string::npos);  // not reached
    for (const auto& step : result.definition->steps) {
        CHECK(svg.find(">" + step.name) != std::string::npos);
        if (step.kind == sagaflow::StepKind::kPivot) CHECK(svg.find("<polygon") != std::string::npos);
    }
    // One line per edge of the graph: the same edges as the DOT diagram.
    const std::string dot = sagaflow::RenderGraph(*result.definition, sagaflow::GraphFormat::kDot);
    std::size_t lines = 0, edges = 0;
    for (std::size_t at = 0; (at = svg.find("<line ", at)) != std::string::npos; ++at) ++lines;
    for (std::size_t at = 0; (at = dot.find(" -> ", at)) != std::string::npos; ++at) ++edges;
    CHECK(lines == edges);
    CHECK(sagaflow::ParseGraphFormat("svg") == sagaflow::GraphFormat::kSvg);
    CHECK(!sagaflow::ParseGraphFormat("png"));
}

TEST_CASE("the Mermaid check itself refuses broken diagrams") {
    CHECK(MermaidProblems("---\ntitle: x\n---\nflowchart LR\n    a[\"a\"]\n    a --> b\n") ==
          "edge to an undeclared node: a -> b");
    CHECK(MermaidProblems("---\ntitle: x\n---\nflowchart LR\n    a[\"a\"\n") ==
          "not a node or edge statement:     a[\"a\"");
    CHECK(MermaidProblems("---\ntitle: x\n---\nflowchart LR\n    a[\"a\"]\n    a --> a\n    class a done\n") ==
          "class used before its classDef:     class a done");
}

TEST_CASE("definitions written before steps formed a graph keep their canonical hashes") {
    // The hashes running instances are pinned to (sagaflow validate printed them before `after:`
    // and `when:` existed).
    const std::map<std::string, std::string> pinned{
        {"sagas/order-payment.yaml", "91b677236567"},
        {"bench/sagas/trip-booking-linear.yaml", "4ec5d84f274a"},
        {"tests/corpus/upgrade/order-payment-v2-unsafe.yaml", "3456e6f70112"}};
    for (const auto& [file, hash] : pinned) {
        CAPTURE(file);
        const auto result = sagaflow::LoadDefinitionFile(SourceDir() / file);
        REQUIRE(result.definition);
        CHECK(result.definition->hash.substr(0, 12) == hash);
    }
}

TEST_CASE("'after' naming the step before, or nothing for the first, means no 'after': one form, one hash") {
    const std::string plain = R"(
saga: s
version: 1
steps:
  - {name: a, participant: p, kind: compensatable, command: A, compensation: UndoA}
  - {name: b, participant: p, kind: pivot, command: B}
)";
    const std::string spelled = R"(
saga: s
version: 1
steps:
  - {name: a, after: [], participant: p, kind: compensatable, command: A, compensation: UndoA}
  - {name: b, after: [a], participant: p, kind: pivot, command: B}
)";
    const auto a = sagaflow::LoadDefinitionString(plain, "plain.yaml");
    const auto b = sagaflow::LoadDefinitionString(spelled, "spelled.yaml");
    REQUIRE(a.definition);
    REQUIRE(b.definition);
    CHECK(a.definition->hash == b.definition->hash);
    CHECK(!b.definition->steps[1].after.has_value());
    // The order of names in `after` does not matter either; a condition does.
    const auto trip = sagaflow::LoadDefinitionFile(SourceDir() / "sagas/trip-booking.yaml");
    REQUIRE(trip.definition);
    CHECK(trip.definition->steps[3].after == std::vector<std::string>{"insure", "reserve-flight", "reserve-hotel"});
    const auto canonical = trip.definition->Canonical();
    CHECK(canonical["steps"][2]["when"] == nlohmann::json{{"path", "$.input.insurance"}, {"equals", true}});
    CHECK(!canonical["steps"][4].contains("after"));  // confirm-hotel follows charge-card, as listed
}

TEST_CASE("a graph saga's diagram shows its fork, join and condition, and an instance's skipped and parallel steps") {
    const auto result = sagaflow::LoadDefinitionFile(SourceDir() / "sagas/trip-booking.yaml");
    REQUIRE(result.definition);
    const std::string mermaid = sagaflow::RenderGraph(*result.definition, sagaflow::GraphFormat::kMermaid);
    CHECK(MermaidProblems(mermaid) == "");
    // Fork: the three first steps start with the saga; join: the charge waits for all three.
    for (const char* edge : {"    start --> s0\n",
                             "    start --> s1\n",
                             "    start --> s2\n",
                             "    s0 -->|success| s3\n",
                             "    s1 -->|success| s3\n",
                             "    s2 -->|success| s3\n",
                             "    s4 -->|success| s6\n",
                             "    s5 -->|success| s6\n",
                             "    s0 -.->|failure| c1\n",
                             "    s3 -.->|failure| c2\n"}) {
        CHECK_MESSAGE(mermaid.find(edge) != std::string::npos, edge);
    }
    CHECK(mermaid.find("when $.input.insurance equals true") != std::string::npos);
    // An instance: the holds in flight side by side, the insurance skipped.
    sagaflow::GraphOverlay overlay;
    overlay.title = "saga x: running";
    overlay.saga_status = "running";
    overlay.phases = {{{"reserve-hotel", "action"}, "dispatched"},
                      {{"reserve-flight", "action"}, "dispatched"},
                      {{"insure", "action"}, "skipped"}};
    const std::string svg = sagaflow::RenderGraph(*result.definition, sagaflow::GraphFormat::kSvg, &overlay);
    CHECK(svg.find("data-node=\"s2\" data-status=\"skipped\"><rect") != std::string::npos);
    CHECK(svg.find("fill=\"#eeeeee\" stroke=\"#757575\"") != std::string::npos);  // skipped: grey
    CHECK(svg.find("data-node=\"s0\" data-status=\"dispatched\"") != std::string::npos);
    CHECK(svg.find("data-node=\"s1\" data-status=\"dispatched\"") != std::string::npos);
    const std::string with_classes =
        sagaflow::RenderGraph(*result.definition, sagaflow::GraphFormat::kMermaid, &overlay);
    CHECK(MermaidProblems(with_classes) == "");
    CHECK(with_classes.find("    class s2 skipped\n") != std::string::npos);
}
