// The `sagaflow` command line. Exit codes: 0 success, 1 the input is invalid, 2 usage error.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "engine/definition_graph.hpp"
#include "engine/definition_loader.hpp"
#include "engine/version.hpp"

namespace {

constexpr int kExitInvalid = 1;
constexpr int kExitUsage = 2;

int Validate(const std::vector<std::string>& files) {
    int invalid = 0;
    for (const auto& file : files) {
        const auto result = sagaflow::LoadDefinitionFile(file);
        for (const auto& d : result.diagnostics) {
            std::cerr << d.ToString() << "\n";
        }
        if (result.definition) {
            std::cout << file << ": ok (" << result.definition->name << " v" << result.definition->version << ", "
                      << result.definition->steps.size() << " steps, hash " << result.definition->hash.substr(0, 12)
                      << ")\n";
        } else {
            ++invalid;
        }
    }
    if (invalid > 0) {
        std::cerr << invalid << " of " << files.size() << " definition file(s) invalid\n";
    }
    return invalid == 0 ? 0 : kExitInvalid;
}

int Graph(const std::string& file, const std::string& format) {
    const auto result = sagaflow::LoadDefinitionFile(file);
    for (const auto& d : result.diagnostics) {
        std::cerr << d.ToString() << "\n";
    }
    if (!result.definition) {
        return kExitInvalid;
    }
    std::cout << sagaflow::RenderGraph(*result.definition,
                                       format == "dot" ? sagaflow::GraphFormat::kDot : sagaflow::GraphFormat::kMermaid);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"sagaflow: a saga orchestrator engine with idempotent steps"};
    app.set_version_flag("--version", std::string(sagaflow::Version()));
    app.require_subcommand(1);

    std::vector<std::string> validate_files;
    auto* validate = app.add_subcommand("validate", "Check saga definition files; errors in compiler style");
    validate->add_option("FILE", validate_files, "YAML saga definition")->required()->check(CLI::ExistingFile);

    std::string graph_file;
    std::string graph_format = "mermaid";
    auto* graph = app.add_subcommand("graph", "Draw a saga: forward path, compensations in reverse, pivot marked");
    graph->add_option("FILE", graph_file, "YAML saga definition")->required()->check(CLI::ExistingFile);
    graph->add_option("--format", graph_format, "mermaid or dot")
        ->check(CLI::IsMember({"mermaid", "dot"}))
        ->capture_default_str();

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        app.exit(e);
        return kExitUsage;
    }
    if (*validate) return Validate(validate_files);
    if (*graph) return Graph(graph_file, graph_format);
    return kExitUsage;
}
