#pragma once
// Loads saga definitions from YAML. Pure: reads the given file or string, nothing else. Every
// problem found is reported (not only the first), each with file:line:column and the path of the
// offending node (e.g. `steps[2].compensation`).

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/definition.hpp"

namespace sagaflow {

struct Diagnostic {
    std::string file;
    int line = 0;    // 1-based; 0 when the problem has no position (e.g. an unreadable file)
    int column = 0;  // 1-based
    std::string path;
    std::string message;

    // Compiler style: "file:line:col: error: path: message".
    std::string ToString() const;
};

struct LoadResult {
    std::optional<SagaDefinition> definition;  // set exactly when `diagnostics` is empty
    std::vector<Diagnostic> diagnostics;
};

// A definition file may be at most this large; larger input is refused before parsing.
inline constexpr std::size_t kMaxDefinitionBytes = 1 << 20;

LoadResult LoadDefinitionString(std::string_view text, std::string_view source_name);
LoadResult LoadDefinitionFile(const std::filesystem::path& path);

// Thrown by APIs that need a valid definition (the engine's registration); holds every diagnostic.
class DefinitionError : public std::runtime_error {
  public:
    explicit DefinitionError(std::vector<Diagnostic> diagnostics);
    const std::vector<Diagnostic>& Diagnostics() const noexcept { return diagnostics_; }

  private:
    std::vector<Diagnostic> diagnostics_;
};

// The loaded definition, or DefinitionError with every diagnostic.
SagaDefinition LoadDefinitionOrThrow(const std::filesystem::path& path);

}  // namespace sagaflow
