#pragma once
// The positioned YAML reading that saga definitions and the configuration file share. Every
// problem is collected, not only the first, each with file:line:column and the path of the
// offending node; unknown keys are refused with the allowed ones and a "did you mean"; scalars are
// read as strings, integers, numbers, booleans and durations, each checked against its range.

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/definition_loader.hpp"

namespace sagaflow::detail {

struct YamlEntry {
    YAML::Node key;
    YAML::Node value;
};
using YamlFields = std::map<std::string, YamlEntry>;

// One diagnostic a line, for an exception's message.
std::string JoinDiagnostics(const std::vector<Diagnostic>& diagnostics);

std::size_t EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `word` within a small edit distance (a typo), else "".
template <typename Range>
std::string Closest(std::string_view word, const Range& candidates) {
    if (word.empty() || word.size() > 128) return "";  // no typo of a name is that long
    std::string best;
    // Close enough to be a typo, and not a rewrite of a short word ("zz" is no typo of "a").
    std::size_t best_distance = std::min(std::max<std::size_t>(1, word.size() / 3), word.size() - 1) + 1;
    for (const auto& candidate : candidates) {
        const std::size_t d = EditDistance(word, candidate);
        if (d < best_distance) {
            best_distance = d;
            best = std::string(candidate);
        }
    }
    return best;
}

// " (did you mean 'x'?)" for the Closest candidate, else "".
template <typename Range>
std::string Suggest(std::string_view word, const Range& candidates) {
    const std::string best = Closest(word, candidates);
    return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::string_view KindOfNode(const YAML::Node& node);
std::string Join(const std::string& path, std::string_view key);
std::string FormatDuration(std::chrono::milliseconds value);

// What kind of document a reader expects, for its messages.
struct DocumentKind {
    std::string noun;           // "a saga definition"
    std::size_t max_bytes = 0;  // larger input is refused before parsing
    std::string one_per_file;   // the hint when a file holds more than one document
};

// The file's text, or a diagnostic (unreadable, or larger than `kind.max_bytes`: never read whole).
std::optional<std::string> ReadDocumentFile(const std::filesystem::path& path,
                                            const DocumentKind& kind,
                                            std::vector<Diagnostic>& diagnostics);

class YamlReader {
  public:
    YamlReader(std::string file, DocumentKind kind) : file_(std::move(file)), kind_(std::move(kind)) {}

    // The diagnostics so far, in the order of their positions.
    std::vector<Diagnostic> TakeDiagnostics();

  protected:
    // The document's root: checks size, UTF-8, syntax (with a hint for tabs), nesting depth and
    // that there is one document. nullopt after an error; a null root for an empty document.
    std::optional<YAML::Node> Parse(std::string_view text);

    void Error(const YAML::Mark& mark, const std::string& path, std::string message);
    static YAML::Mark MarkOf(const YamlEntry& entry) {
        // A missing value ("key:" and nothing) has no useful mark of its own: point at the key.
        const YAML::Mark value_mark = entry.value.Mark();
        return value_mark.is_null() || entry.value.IsNull() ? entry.key.Mark() : value_mark;
    }
    // Diagnostics about `path` name `origin` (e.g. an environment variable) instead of the file.
    void SetOrigin(const std::string& path, std::string origin) { origins_[path] = std::move(origin); }

    std::optional<YamlFields> Map(const YAML::Node& node,
                                  const YAML::Mark& mark,
                                  const std::string& path,
                                  const std::vector<std::string_view>& allowed);
    bool Scalar(const YamlEntry& entry, const std::string& path, std::string_view expected);
    // The entry under `key` when it is a scalar; null when absent, or (with an error saying
    // `expected`) when it is not a scalar. `here` is the key's path.
    const YamlEntry* ScalarAt(const YamlFields& fields,
                              std::string_view key,
                              const std::string& here,
                              std::string_view expected);
    std::optional<std::string> String(const YamlFields& fields,
                                      std::string_view key,
                                      const std::string& path,
                                      const YAML::Mark& parent,
                                      bool required,
                                      bool (*valid)(std::string_view) = nullptr,
                                      std::string_view pattern_hint = {});
    std::optional<long long> Integer(
        const YamlFields& fields, std::string_view key, const std::string& path, long long min, long long max);
    std::optional<double> Number(
        const YamlFields& fields, std::string_view key, const std::string& path, double min, double max);
    std::optional<bool> Bool(const YamlFields& fields, std::string_view key, const std::string& path);
    std::optional<std::chrono::milliseconds> Duration(const YamlFields& fields,
                                                      std::string_view key,
                                                      const std::string& path,
                                                      std::chrono::milliseconds min,
                                                      std::chrono::milliseconds max);

    std::string file_;
    DocumentKind kind_;
    std::vector<Diagnostic> diagnostics_;

  private:
    std::map<std::string, std::string> origins_;
};

}  // namespace sagaflow::detail
