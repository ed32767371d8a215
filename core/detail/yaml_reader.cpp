#include "core/detail/yaml_reader.hpp"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include <charconv>
#include <fstream>
#include <sstream>

#include "core/text_scan.hpp"

namespace sagaflow::detail {

using std::chrono::milliseconds;

std::string JoinDiagnostics(const std::vector<Diagnostic>& diagnostics) {
    std::string text;
    for (const auto& d : diagnostics) text += d.ToString() + "\n";
    return text;
}

std::size_t EditDistance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

std::string_view KindOfNode(const YAML::Node& node) {
    switch (node.Type()) {
        case YAML::NodeType::Map:
            return "a mapping";
        case YAML::NodeType::Sequence:
            return "a list";
        case YAML::NodeType::Scalar:
            return "a scalar";
        case YAML::NodeType::Null:
            return "no value";
        default:
            return "no value";
    }
}

std::string Join(const std::string& path, std::string_view key) {
    // A key is echoed in every message under it: a long or hostile one is cut and escaped.
    const std::string shown = text::Quote(key, 64, false);
    return path.empty() ? shown : path + "." + shown;
}

namespace {

Diagnostic TooLarge(const std::string& file, std::uintmax_t size, const DocumentKind& kind) {
    return {file,
            0,
            0,
            "",
            "the file is " + std::to_string(size) + " bytes; " + kind.noun + " may be at most " +
                std::to_string(kind.max_bytes) + " bytes. Hint: is this the right file?"};
}

bool ValidUtf8(std::string_view text, std::size_t& bad_offset) {
    std::size_t i = 0;
    while (i < text.size()) {
        const auto c = static_cast<unsigned char>(text[i]);
        std::size_t length = 0;
        unsigned int min = 0;
        unsigned int code = 0;
        if (c == 0) {
            bad_offset = i;
            return false;
        } else if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            length = 2, min = 0x80, code = c & 0x1Fu;
        } else if ((c & 0xF0) == 0xE0) {
            length = 3, min = 0x800, code = c & 0x0Fu;
        } else if ((c & 0xF8) == 0xF0) {
            length = 4, min = 0x10000, code = c & 0x07u;
        } else {
            bad_offset = i;
            return false;
        }
        if (i + length > text.size()) {
            bad_offset = i;
            return false;
        }
        for (std::size_t k = 1; k < length; ++k) {
            const auto cc = static_cast<unsigned char>(text[i + k]);
            if ((cc & 0xC0) != 0x80) {
                bad_offset = i;
                return false;
            }
            code = (code << 6) | (cc & 0x3Fu);
        }
        if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
            bad_offset = i;
            return false;
        }
        i += length;
    }
    return true;
}

YAML::Mark MarkAtOffset(std::string_view text, std::size_t offset) {
    YAML::Mark mark;
    mark.pos = static_cast<int>(offset);
    mark.line = static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
    const auto line_start = text.rfind('\n', offset == 0 ? 0 : offset - 1);
    mark.column =
        static_cast<int>(line_start == std::string_view::npos || offset == 0 ? offset : offset - line_start - 1);
    return mark;
}

// Records where each document starts; nothing else.
class DocumentCounter final : public YAML::EventHandler {
  public:
    void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
    std::vector<YAML::Mark> starts;
};

std::optional<YAML::Mark> SecondDocumentMark(std::string_view text) {
    std::istringstream stream{std::string(text)};
    YAML::Parser parser{stream};
    DocumentCounter counter;
    for (int i = 0; i < 2 && parser.HandleNextDocument(counter); ++i) {
    }
    if (counter.starts.size() < 2) {
        return std::nullopt;
    }
    return counter.starts[1];
}

}  // namespace

std::optional<std::string> ReadDocumentFile(const std::filesystem::path& path,
                                            const DocumentKind& kind,
                                            std::vector<Diagnostic>& diagnostics) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) {
        diagnostics.push_back({path.string(), 0, 0, "", "cannot read the file: " + ec.message()});
        return std::nullopt;
    }
    if (size > kind.max_bytes) {
        diagnostics.push_back(TooLarge(path.string(), size, kind));  // never read a huge file into memory
        return std::nullopt;
    }
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
        diagnostics.push_back({path.string(), 0, 0, "", "cannot read the file"});
        return std::nullopt;
    }
    return text;
}

std::vector<Diagnostic> YamlReader::TakeDiagnostics() {
    std::stable_sort(diagnostics_.begin(), diagnostics_.end(), [](const auto& a, const auto& b) {
        return std::tie(a.line, a.column) < std::tie(b.line, b.column);
    });
    return std::move(diagnostics_);
}

void YamlReader::Error(const YAML::Mark& mark, const std::string& path, std::string message) {
    if (const auto origin = origins_.find(path); origin != origins_.end()) {
        diagnostics_.push_back({origin->second, 0, 0, path, std::move(message)});
        return;
    }
    diagnostics_.push_back(
        {file_, mark.is_null() ? 0 : mark.line + 1, mark.is_null() ? 0 : mark.column + 1, path, std::move(message)});
}

std::optional<YAML::Node> YamlReader::Parse(std::string_view text) {
    if (text.size() > kind_.max_bytes) {
        diagnostics_.push_back(TooLarge(file_, text.size(), kind_));
        return std::nullopt;
    }
    std::size_t bad = 0;
    if (!ValidUtf8(text, bad)) {
        Error(MarkAtOffset(text, bad),
              "",
              text[bad] == '\0' ? "a NUL byte: this looks like a binary file, not YAML"
                                : "invalid UTF-8 byte sequence: save the file as UTF-8");
        return std::nullopt;
    }
    // YAML::LoadAll is not used: in yaml-cpp 0.7 it loops forever, allocating, on some malformed
    // input (found by our fuzzer; upstream yaml-cpp PR #1319). Load reads the first document only;
    // SecondDocumentMark looks for a second one with a bounded number of parser calls.
    YAML::Node root;
    std::optional<YAML::Mark> second_document;
    try {
        root = YAML::Load(std::string(text));
        second_document = SecondDocumentMark(text);
    } catch (const YAML::DeepRecursion& e) {
        Error(e.mark,
              "",
              "the document is nested more than " + std::to_string(e.depth()) + " levels deep; " + kind_.noun +
                  " needs a handful");
        return std::nullopt;
    } catch (const YAML::Exception& e) {
        std::string message = e.msg;
        if (message.find("tab") != std::string::npos || text.find('\t') != std::string_view::npos) {
            message += " (YAML does not allow tabs for indentation: use spaces)";
        }
        Error(e.mark, "", "YAML syntax: " + message);
        return std::nullopt;
    }
    if (second_document) {
        Error(*second_document,
              "",
              "more than one YAML document, or text after the first one ends: " + kind_.one_per_file);
    }
    return root;
}

std::optional<YamlFields> YamlReader::Map(const YAML::Node& node,
                                          const YAML::Mark& mark,
                                          const std::string& path,
                                          const std::vector<std::string_view>& allowed) {
    if (!node.IsMap()) {
        Error(mark, path, "expected a mapping of keys, found " + std::string(KindOfNode(node)));
        return std::nullopt;
    }
    YamlFields fields;
    for (auto it = node.begin(); it != node.end(); ++it) {
        const YAML::Node key = it->first;
        if (!key.IsScalar()) {
            Error(key.Mark(), path, "a key must be a plain name, found " + std::string(KindOfNode(key)));
            continue;
        }
        const std::string& name = key.Scalar();
        if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
            std::string known;
            for (const auto& a : allowed) known += (known.empty() ? "" : ", ") + std::string(a);
            Error(key.Mark(),
                  Join(path, name),
                  "unknown key " + text::Quote(name) + Suggest(name, allowed) + "; allowed here: " + known);
            continue;
        }
        if (const auto previous = fields.find(name); previous != fields.end()) {
            Error(key.Mark(),
                  Join(path, name),
                  "duplicate key " + text::Quote(name) + " (first at line " +
                      std::to_string(previous->second.key.Mark().line + 1) + ")");
            continue;
        }
        fields.emplace(name, YamlEntry{key, it->second});
    }
    return fields;
}

const YamlEntry* YamlReader::ScalarAt(const YamlFields& fields,
                                      std::string_view key,
                                      const std::string& here,
                                      std::string_view expected) {
    const auto it = fields.find(std::string(key));
    if (it == fields.end() || !Scalar(it->second, here, expected)) return nullptr;
    return &it->second;
}

bool YamlReader::Scalar(const YamlEntry& entry, const std::string& path, std::string_view expected) {
    if (entry.value.IsScalar()) {
        return true;
    }
    Error(MarkOf(entry), path, "expected " + std::string(expected) + ", found " + std::string(KindOfNode(entry.value)));
    return false;
}

std::optional<std::string> YamlReader::String(const YamlFields& fields,
                                              std::string_view key,
                                              const std::string& path,
                                              const YAML::Mark& parent,
                                              bool required,
                                              bool (*valid)(std::string_view),
                                              std::string_view pattern_hint) {
    const std::string here = Join(path, key);
    if (required && fields.count(std::string(key)) == 0) {
        Error(parent, path, "missing required key '" + std::string(key) + "'");
        return std::nullopt;
    }
    const YamlEntry* entry = ScalarAt(fields, key, here, "a string");
    if (entry == nullptr) return std::nullopt;
    std::string value = entry->value.Scalar();
    if (valid != nullptr && !valid(value)) {
        Error(MarkOf(*entry), here, text::Quote(value) + " is not a valid name: " + std::string(pattern_hint));
        return std::nullopt;
    }
    return value;
}

std::optional<long long> YamlReader::Integer(
    const YamlFields& fields, std::string_view key, const std::string& path, long long min, long long max) {
    const std::string here = Join(path, key);
    const YamlEntry* entry = ScalarAt(fields, key, here, "an integer");
    if (entry == nullptr) return std::nullopt;
    const std::string& text = entry->value.Scalar();
    long long value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) {
        Error(MarkOf(*entry), here, "expected an integer, found " + text::Quote(text));
        return std::nullopt;
    }
    if (value < min || value > max) {
        Error(
            MarkOf(*entry),
            here,
            std::to_string(value) + " is out of range: allowed " + std::to_string(min) + " to " + std::to_string(max));
        return std::nullopt;
    }
    return value;
}

std::optional<double> YamlReader::Number(
    const YamlFields& fields, std::string_view key, const std::string& path, double min, double max) {
    const std::string here = Join(path, key);
    const YamlEntry* entry = ScalarAt(fields, key, here, "a number");
    if (entry == nullptr) return std::nullopt;
    const std::string& text = entry->value.Scalar();
    double value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) {
        Error(MarkOf(*entry), here, "expected a number, found " + text::Quote(text));
        return std::nullopt;
    }
    if (!(value >= min && value <= max)) {
        std::ostringstream range;
        range << min << " to " << max;
        Error(MarkOf(*entry), here, text::Quote(text) + " is out of range: allowed " + range.str());
        return std::nullopt;
    }
    return value;
}

std::string FormatDuration(milliseconds value) {
    const auto ms = value.count();
    if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
    if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
    if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
    return std::to_string(ms) + "ms";
}

std::optional<milliseconds> YamlReader::Duration(
    const YamlFields& fields, std::string_view key, const std::string& path, milliseconds min, milliseconds max) {
    const std::string here = Join(path, key);
    const YamlEntry* entry = ScalarAt(fields, key, here, "a duration such as 30s");
    if (entry == nullptr) return std::nullopt;
    const std::string& text = entry->value.Scalar();
    const auto parsed = text::ParseDurationMs(text);
    if (!parsed) {
        Error(MarkOf(*entry),
              here,
              "invalid duration " + text::Quote(text) +
                  ": write a whole number with a unit ms, s, m or h (e.g. 30s, 500ms)");
        return std::nullopt;
    }
    const milliseconds value{*parsed};
    if (value < min || value > max) {
        Error(MarkOf(*entry),
              here,
              "duration " + text + " is out of range: allowed " + FormatDuration(min) + " to " + FormatDuration(max));
        return std::nullopt;
    }
    return value;
}

std::optional<bool> YamlReader::Bool(const YamlFields& fields, std::string_view key, const std::string& path) {
    const std::string here = Join(path, key);
    const YamlEntry* entry = ScalarAt(fields, key, here, "true or false");
    if (entry == nullptr) return std::nullopt;
    const std::string& text = entry->value.Scalar();
    if (text == "true" || text == "false") return text == "true";
    Error(MarkOf(*entry), here, "expected true or false, found " + text::Quote(text));
    return std::nullopt;
}

}  // namespace sagaflow::detail
