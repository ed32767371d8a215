#include "config/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>
#include <sstream>

#include "core/detail/yaml_reader.hpp"
#include "core/text_scan.hpp"
#include "outbox/kafka.hpp"
#include "store/url.hpp"

extern char** environ;  // NOLINT: POSIX, for ProcessEnvironment

namespace sagaflow {

Environment ProcessEnvironment() {
    Environment env;
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
        const std::string_view text{*entry};
        const auto eq = text.find('=');
        if (eq != std::string_view::npos) env.emplace(text.substr(0, eq), text.substr(eq + 1));
    }
    return env;
}

ConfigError::ConfigError(std::vector<Diagnostic> diagnostics)
    : std::runtime_error("invalid configuration:\n" + detail::JoinDiagnostics(diagnostics)),
      diagnostics_(std::move(diagnostics)) {}

namespace {

using detail::Join;
using detail::YamlEntry;
using detail::YamlFields;
using std::chrono::milliseconds;
using namespace std::chrono_literals;

constexpr std::size_t kMaxSecretBytes = 64 << 10;
constexpr std::string_view kEnvPrefix = "SAGAFLOW_";

const detail::DocumentKind& ConfigKind() {
    static const detail::DocumentKind kKind{"a configuration file",
                                            kMaxConfigBytes,
                                            "one configuration a file (sections db, kafka, engine, http, participant)"};
    return kKind;
}

// Kafka properties whose values are secrets: never inline in the file, never printed.
bool IsSecretProperty(std::string_view key) {
    return key.find("password") != std::string_view::npos || key.find("secret") != std::string_view::npos ||
           key == "ssl.key.pem" || key == "sasl.oauthbearer.config";
}

std::string Upper(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
    return out;
}

std::string Trim(const std::string& text) {
    const auto first = text.find_first_not_of(" \t\n");
    return first == std::string::npos ? std::string() : text.substr(first, text.find_last_not_of(" \t\n") - first + 1);
}

// The password as a libpq connection parameter added to the URL (URI: a query parameter,
// percent-encoded; keyword form: a quoted keyword).
std::string WithPassword(const std::string& url, const std::string& password) {
    if (url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0) {
        std::string encoded;
        static constexpr char kHex[] = "0123456789ABCDEF";
        for (const char ch : password) {
            const auto c = static_cast<unsigned char>(ch);
            if (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
                encoded += ch;
            } else {
                encoded += '%';
                encoded += kHex[c >> 4];
                encoded += kHex[c & 15];
            }
        }
        return url + (url.find('?') == std::string::npos ? "?" : "&") + "password=" + encoded;
    }
    std::string quoted;
    for (const char c : password) {
        if (c == '\'' || c == '\\') quoted += '\\';
        quoted += c;
    }
    return url + " password='" + quoted + "'";
}

class ConfigReader;

// How a key's environment variable SAGAFLOW_<SECTION>_<KEY> applies (ConfigReader::Section).
enum class KeyKind {
    kScalar,   // replaces the value
    kMapping,  // "name=value;name=value" sets those entries over the file's
    kList,     // "a,b" replaces the list
};

// One configuration key: what reads it, what prints it, and its line in config/README.md. Keys()
// lists every key once; parsing, the environment variables, Describe() and ConfigKeysMarkdown()
// all come from it.
struct ConfigKey {
    std::string_view section;
    std::string_view name;
    KeyKind kind = KeyKind::kScalar;
    std::string type;      // type and range, as the README shows them
    std::string fallback;  // the default as the README shows it; empty: what Describe() prints for Config{}
    std::string sets;      // what it sets
    std::function<void(ConfigReader&, const detail::YamlFields& section, Config&)> read;
    std::function<void(YAML::Emitter&, const Config&)> show;  // null: never printed (a secret)

    std::string Path() const { return std::string(section) + "." + std::string(name); }
    std::string Variable() const { return std::string(kEnvPrefix) + Upper(section) + "_" + Upper(name); }
};

const std::vector<ConfigKey>& Keys();

// The sections in the order of Keys().
std::vector<std::string_view> Sections() {
    std::vector<std::string_view> out;
    for (const auto& key : Keys()) {
        if (std::find(out.begin(), out.end(), key.section) == out.end()) out.push_back(key.section);
    }
    return out;
}

class ConfigReader : public detail::YamlReader {
  public:
    ConfigReader(std::string file, const Environment& env, std::filesystem::path base_dir)
        : YamlReader(std::move(file), ConfigKind()), env_(env), base_dir_(std::move(base_dir)) {}

    ConfigResult Run(std::string_view text);

    // What the keys' read functions use (Keys()).
    using YamlReader::Bool;
    using YamlReader::Duration;
    using YamlReader::Error;
    using YamlReader::Integer;
    using YamlReader::MarkOf;
    using YamlReader::String;
    // `{env: NAME}` or `{file: PATH}`; a plain value only from an environment variable.
    std::optional<std::string> Secret(const YamlFields& fields, std::string_view key, const std::string& path);
    std::map<std::string, std::string> KafkaProperties(const YamlFields& fields,
                                                       std::string_view key,
                                                       const std::string& path);
    // A mapping of plain names to plain strings (`example` shows one entry in the error).
    std::map<std::string, std::string> Names(const YamlFields& fields,
                                             std::string_view key,
                                             const std::string& parent,
                                             const std::string& example);
    void ReadDbUrl(const YamlFields& db, Config& config);
    void ReadDbPassword(const YamlFields& db, Config& config);
    void ReadSagas(const YamlFields& engine, Config& config);
    void ReadTokens(const YamlFields& http, Config& config);

  private:
    // The section's fields, the file's with the environment's over them: each key has a variable
    // SAGAFLOW_<SECTION>_<KEY> that, when set, overrides it as its KeyKind says.
    std::optional<YamlFields> Section(const YamlFields& root, std::string_view name);
    // The entries a mapping's variable sets, in its order (empty when it is not set).
    const std::vector<std::pair<std::string, std::string>>& EnvEntries(const std::string& path) const;
    std::optional<std::string> SecretFrom(const YamlEntry& entry, const std::string& path);
    // A mapping's entries, the file's (each read by `read`, nullopt when it is refused) and then
    // the environment's (SAGAFLOW_<SECTION>_<KEY>), each handed to `accept`.
    using ReadValue =
        std::function<std::optional<std::string>(const YamlEntry&, const std::string& path, const std::string& name)>;
    using Accept = std::function<void(const std::string& name, const std::string& value, const YAML::Mark&)>;
    void Mapping(const YamlFields& fields,
                 std::string_view key,
                 const std::string& path,
                 const std::string& expected,
                 const std::string& bad_name,
                 const ReadValue& read,
                 const Accept& accept);
    void CheckEnvironment();

    const Environment& env_;
    std::filesystem::path base_dir_;
    std::vector<std::string> known_env_;
    std::map<std::string, std::vector<std::string>> section_keys_;  // "SAGAFLOW_DB_" -> {"URL", ...}
    std::set<std::string> from_env_;                                // paths whose value came from the environment
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> env_entries_;  // mapping path -> entries
};

std::optional<YamlFields> ConfigReader::Section(const YamlFields& root, std::string_view name) {
    std::vector<std::string_view> allowed, scalars, maps, lists;
    for (const auto& key : Keys()) {
        if (key.section != name) continue;
        allowed.push_back(key.name);
        (key.kind == KeyKind::kScalar ? scalars : key.kind == KeyKind::kMapping ? maps : lists).push_back(key.name);
    }
    YamlFields fields;
    if (const auto it = root.find(std::string(name)); it != root.end() && !it->second.value.IsNull()) {
        auto read = Map(it->second.value, MarkOf(it->second), std::string(name), allowed);
        if (!read) return std::nullopt;
        fields = std::move(*read);
    }
    const std::string prefix = std::string(kEnvPrefix) + Upper(name) + "_";
    // Registers the key's variable (known, for the near-miss check); its value when set and not empty.
    const auto variable_of = [&](std::string_view key) -> std::optional<std::string> {
        section_keys_[prefix].push_back(Upper(key));
        known_env_.push_back(prefix + Upper(key));
        const auto value = env_.find(known_env_.back());
        if (value == env_.end() || value->second.empty()) return std::nullopt;
        return value->second;
    };
    for (const auto key : scalars) {
        const auto text = variable_of(key);
        if (!text) continue;
        const std::string path = Join(std::string(name), key);
        fields[std::string(key)] = YamlEntry{YAML::Node(std::string(key)), YAML::Node(*text)};
        SetOrigin(path, "$" + known_env_.back());
        from_env_.insert(path);
    }
    for (const auto key : maps) {
        const auto text = variable_of(key);
        if (!text) continue;
        const std::string variable = known_env_.back();
        const std::string path = Join(std::string(name), key);
        auto& entries = env_entries_[path];
        std::istringstream in(*text);
        for (std::string item; std::getline(in, item, ';');) {
            item = Trim(item);
            if (item.empty()) continue;
            const auto eq = item.find('=');
            const std::string entry = eq == std::string::npos ? "" : Trim(item.substr(0, eq));
            if (entry.empty()) {
                diagnostics_.push_back({"$" + variable,
                                        0,
                                        0,
                                        path,
                                        "expected NAME=VALUE entries separated by ';', found '" +
                                            (eq == std::string::npos ? item : item.substr(0, eq + 1)) + "'"});
                continue;
            }
            SetOrigin(Join(path, entry), "$" + variable);
            from_env_.insert(Join(path, entry));
            entries.emplace_back(entry, Trim(item.substr(eq + 1)));
        }
    }
    for (const auto key : lists) {
        const auto text = variable_of(key);
        if (!text) continue;
        const std::string path = Join(std::string(name), key);
        YAML::Node list(YAML::NodeType::Sequence);
        std::istringstream in(*text);
        for (std::string item; std::getline(in, item, ',');) {
            if (!item.empty()) list.push_back(item);
        }
        SetOrigin(path, "$" + known_env_.back());
        for (std::size_t i = 0; i < list.size(); ++i)
            SetOrigin(path + "[" + std::to_string(i) + "]", "$" + known_env_.back());
        fields[std::string(key)] = YamlEntry{YAML::Node(std::string(key)), list};
        from_env_.insert(path);
    }
    return fields;
}

const std::vector<std::pair<std::string, std::string>>& ConfigReader::EnvEntries(const std::string& path) const {
    static const std::vector<std::pair<std::string, std::string>> kNone;
    const auto it = env_entries_.find(path);
    return it == env_entries_.end() ? kNone : it->second;
}

std::optional<std::string> ConfigReader::SecretFrom(const YamlEntry& entry, const std::string& path) {
    if (entry.value.IsScalar()) {
        if (from_env_.count(path) != 0) return entry.value.Scalar();
        Error(MarkOf(entry),
              path,
              "a secret is not written into the configuration file: write {env: VARIABLE} or {file: PATH} to "
              "read it from the environment or a file");
        return std::nullopt;
    }
    const auto source = Map(entry.value, MarkOf(entry), path, {"env", "file"});
    if (!source) return std::nullopt;
    if (source->size() != 1) {
        Error(MarkOf(entry), path, "write exactly one of {env: VARIABLE} or {file: PATH}");
        return std::nullopt;
    }
    if (const auto env = source->find("env"); env != source->end()) {
        if (!Scalar(env->second, Join(path, "env"), "an environment variable's name")) return std::nullopt;
        const std::string& name = env->second.value.Scalar();
        known_env_.push_back(name);  // a variable the file names is no typo
        const auto value = env_.find(name);
        if (value == env_.end() || value->second.empty()) {
            Error(MarkOf(env->second), Join(path, "env"), "the environment variable " + name + " is not set or empty");
            return std::nullopt;
        }
        return value->second;
    }
    const auto& file = source->at("file");
    if (!Scalar(file, Join(path, "file"), "a file's path")) return std::nullopt;
    const std::filesystem::path where = base_dir_ / file.value.Scalar();
    std::vector<Diagnostic> problems;
    const detail::DocumentKind kind{"a secret file", kMaxSecretBytes, ""};
    auto text = detail::ReadDocumentFile(where, kind, problems);
    if (!text) {
        Error(MarkOf(file), Join(path, "file"), where.string() + ": " + problems.front().message);
        return std::nullopt;
    }
    // A secret file ends with at most one newline that is not part of the secret (echo > file).
    if (!text->empty() && text->back() == '\n') text->pop_back();
    if (!text->empty() && text->back() == '\r') text->pop_back();
    if (text->empty()) {
        Error(MarkOf(file), Join(path, "file"), where.string() + " is empty");
        return std::nullopt;
    }
    return text;
}

std::optional<std::string> ConfigReader::Secret(const YamlFields& fields,
                                                std::string_view key,
                                                const std::string& path) {
    const auto it = fields.find(std::string(key));
    if (it == fields.end()) return std::nullopt;
    return SecretFrom(it->second, Join(path, key));
}

void ConfigReader::Mapping(const YamlFields& fields,
                           std::string_view key,
                           const std::string& path,
                           const std::string& expected,
                           const std::string& bad_name,
                           const ReadValue& read,
                           const Accept& accept) {
    const auto it = fields.find(std::string(key));
    if (it != fields.end() && !it->second.value.IsNull() && !it->second.value.IsMap()) {
        Error(MarkOf(it->second), path, expected + ", found " + std::string(detail::KindOfNode(it->second.value)));
    } else if (it != fields.end() && it->second.value.IsMap()) {
        for (auto p = it->second.value.begin(); p != it->second.value.end(); ++p) {
            const YamlEntry entry{p->first, p->second};
            if (!p->first.IsScalar()) {
                Error(p->first.Mark(), path, bad_name);
                continue;
            }
            const std::string name = p->first.Scalar();
            const std::string here = Join(path, name);
            if (from_env_.count(here) != 0) continue;  // the environment's value replaces it
            if (const auto value = read(entry, here, name)) accept(name, *value, MarkOf(entry));
        }
    }
    for (const auto& [name, value] : EnvEntries(path)) accept(name, value, YAML::Mark::null_mark());
}

std::map<std::string, std::string> ConfigReader::KafkaProperties(const YamlFields& fields,
                                                                 std::string_view key,
                                                                 const std::string& parent) {
    std::map<std::string, std::string> out;
    const std::string path = Join(parent, key);
    Mapping(
        fields,
        key,
        path,
        "expected a mapping of librdkafka properties (e.g. security.protocol: SSL)",
        "a property's name must be a plain name",
        [&](const YamlEntry& entry, const std::string& here, const std::string& name) -> std::optional<std::string> {
            if (IsSecretProperty(name)) return SecretFrom(entry, here);
            if (Scalar(entry, here, "a property value")) return entry.value.Scalar();
            return std::nullopt;
        },
        // librdkafka checks each value; it quotes the value in its message: keep a secret out of it.
        [&](const std::string& name, const std::string& value, const YAML::Mark& mark) {
            if (auto refused = outbox::KafkaPropertyError(name, value)) {
                if (IsSecretProperty(name)) {
                    for (std::size_t at = 0; !value.empty() && (at = refused->find(value, at)) != std::string::npos;) {
                        refused->replace(at, value.size(), "***");
                    }
                }
                Error(mark, Join(path, name), "librdkafka refuses it: " + *refused);
                return;
            }
            out[name] = value;
        });
    return out;
}

std::map<std::string, std::string> ConfigReader::Names(const YamlFields& fields,
                                                       std::string_view key,
                                                       const std::string& parent,
                                                       const std::string& example) {
    std::map<std::string, std::string> out;
    Mapping(
        fields,
        key,
        Join(parent, key),
        "expected a mapping, e.g. " + example,
        "a name must be a plain name",
        [&](const YamlEntry& entry, const std::string& here, const std::string&) -> std::optional<std::string> {
            if (Scalar(entry, here, "a name")) return entry.value.Scalar();
            return std::nullopt;
        },
        [&](const std::string& name, const std::string& value, const YAML::Mark&) { out[name] = value; });
    return out;
}

void ConfigReader::ReadDbUrl(const YamlFields& db, Config& config) {
    auto url = String(db, "url", "db", {}, false);
    if (url && store::RedactUrl(*url) != *url && from_env_.count("db.url") == 0) {
        Error(MarkOf(db.at("url")),
              "db.url",
              "the URL holds a password: move it to db.password as {env: VARIABLE} or {file: PATH} (or set "
              "SAGAFLOW_DB_URL in the environment)");
        return;
    }
    if (url) config.engine.database_url = config.participant.database_url = *url;
}

void ConfigReader::ReadDbPassword(const YamlFields& db, Config& config) {
    const auto password = Secret(db, "password", "db");
    if (!password) return;
    config.db_password = *password;
    const std::string& url = config.engine.database_url;
    if (url.empty()) return;
    if (store::RedactUrl(url) != url) {
        Error(MarkOf(db.at("password")), "db.password", "db.url holds a password too: keep one of them");
        return;
    }
    config.engine.database_url = config.participant.database_url = WithPassword(url, *password);
}

void ConfigReader::ReadSagas(const YamlFields& engine, Config& config) {
    const auto sagas = engine.find("sagas");
    if (sagas == engine.end() || sagas->second.value.IsNull()) return;
    if (!sagas->second.value.IsSequence()) {
        Error(MarkOf(sagas->second), "engine.sagas", "expected a list of saga definition files");
        return;
    }
    std::size_t i = 0;
    for (const auto& item : sagas->second.value) {
        const std::string path = "engine.sagas[" + std::to_string(i++) + "]";
        if (!item.IsScalar()) {
            Error(item.Mark(), path, "expected a file's path, found " + std::string(detail::KindOfNode(item)));
            continue;
        }
        // Relative paths: from the file's directory, or the working one for SAGAFLOW_ENGINE_SAGAS.
        const auto file =
            (from_env_.count("engine.sagas") != 0 ? std::filesystem::current_path() : base_dir_) / item.Scalar();
        std::error_code ec;
        if (!std::filesystem::is_regular_file(file, ec)) {
            Error(item.Mark(), path, "no such file: " + file.string());
            continue;
        }
        config.sagas.push_back(file.lexically_normal());
    }
}

void ConfigReader::ReadTokens(const YamlFields& http, Config& config) {
    auto& tokens = config.engine.http.tokens;
    const auto add_token = [&](const std::string& client, const std::string& token, const YAML::Mark& mark) {
        if (const auto [it, fresh] = tokens.emplace(token, client); !fresh) {
            Error(mark,
                  Join("http.tokens", client),
                  "the same token as client '" + it->second + "': give each client its own");
        }
    };
    Mapping(
        http,
        "tokens",
        "http.tokens",
        "expected a mapping of client names to tokens, e.g. operator-alice: {env: ALICE_TOKEN}",
        "a client's name must be a plain name",
        [&](const YamlEntry& entry, const std::string& here, const std::string&) { return SecretFrom(entry, here); },
        add_token);
}

void ConfigReader::CheckEnvironment() {
    // SAGAFLOW_<SECTION>_<KEY> with a key one typo from a known one would otherwise change
    // nothing, silently. Variables outside the sections (the test harness's SAGAFLOW_PG_URL) and
    // far from every key are not ours to judge.
    for (const auto& [name, value] : env_) {
        if (std::find(known_env_.begin(), known_env_.end(), name) != known_env_.end()) continue;
        for (const auto& [prefix, keys] : section_keys_) {
            if (name.rfind(prefix, 0) != 0) continue;
            const std::string key = detail::Closest(name.substr(prefix.size()), keys);
            if (key.empty()) continue;
            diagnostics_.push_back(
                {"$" + name,
                 0,
                 0,
                 "",
                 "not a configuration variable (did you mean '" + prefix + key +
                     "'?); the variables are SAGAFLOW_<SECTION>_<KEY>, listed by sagaflow config --keys"});
        }
    }
}

// Factories of the common kinds: the range is written once, for the check and for the README.
using Get = std::function<long long(const Config&)>;

ConfigKey IntegerKey(std::string_view section,
                     std::string_view name,
                     long long min,
                     long long max,
                     std::string sets,
                     std::function<void(Config&, long long)> set,
                     Get get,
                     std::string fallback = {}) {
    const auto text = [](long long n) {
        if (n >= (1LL << 20) && n % (1LL << 20) == 0) return std::to_string(n >> 20) + " MiB";
        return std::to_string(n);
    };
    return {section,
            name,
            KeyKind::kScalar,
            text(min) + "–" + text(max),
            std::move(fallback),
            std::move(sets),
            [=](ConfigReader& r, const YamlFields& f, Config& c) {
                if (const auto n = r.Integer(f, name, std::string(section), min, max)) set(c, *n);
            },
            [get](YAML::Emitter& out, const Config& c) { out << get(c); }};
}

ConfigKey DurationKey(std::string_view section,
                      std::string_view name,
                      milliseconds min,
                      milliseconds max,
                      std::string sets,
                      std::function<void(Config&, milliseconds)> set,
                      std::function<milliseconds(const Config&)> get) {
    return {section,
            name,
            KeyKind::kScalar,
            detail::FormatDuration(min) + "–" + detail::FormatDuration(max),
            {},
            std::move(sets),
            [=](ConfigReader& r, const YamlFields& f, Config& c) {
                if (const auto d = r.Duration(f, name, std::string(section), min, max)) set(c, *d);
            },
            [get](YAML::Emitter& out, const Config& c) { out << detail::FormatDuration(get(c)); }};
}

ConfigKey BoolKey(std::string_view section,
                  std::string_view name,
                  std::string sets,
                  std::function<void(Config&, bool)> set,
                  std::function<bool(const Config&)> get) {
    return {section,
            name,
            KeyKind::kScalar,
            "bool",
            {},
            std::move(sets),
            [=](ConfigReader& r, const YamlFields& f, Config& c) {
                if (const auto b = r.Bool(f, name, std::string(section))) set(c, *b);
            },
            [get](YAML::Emitter& out, const Config& c) { out << get(c); }};
}

struct Pattern {
    bool (*valid)(std::string_view) = nullptr;
    std::string_view hint;
};

ConfigKey StringKey(std::string_view section,
                    std::string_view name,
                    std::string type,
                    std::string fallback,
                    std::string sets,
                    std::function<void(Config&, std::string)> set,
                    std::function<std::string(const Config&)> get,
                    Pattern pattern = {}) {
    return {section,
            name,
            KeyKind::kScalar,
            std::move(type),
            std::move(fallback),
            std::move(sets),
            [=](ConfigReader& r, const YamlFields& f, Config& c) {
                if (auto v = r.String(f, name, std::string(section), {}, false, pattern.valid, pattern.hint)) {
                    set(c, std::move(*v));
                }
            },
            [get](YAML::Emitter& out, const Config& c) { out << get(c); }};
}

// A mapping's entries, secrets as ***.
void ShowMap(YAML::Emitter& out, const std::map<std::string, std::string>& map, bool all_secret = false) {
    out << YAML::BeginMap;
    for (const auto& [key, value] : map)
        out << YAML::Key << key << YAML::Value << (all_secret || IsSecretProperty(key) ? "***" : value);
    out << YAML::EndMap;
}

const std::vector<ConfigKey>& Keys() {
    constexpr auto kTopic = &text::IsTopicName;
    constexpr bool (*kName)(std::string_view) = &text::IsKebabName;
    constexpr auto kSchema = &text::IsSqlName;
    using C = Config;
    static const std::vector<ConfigKey> kKeys{
        // db
        {"db",
         "url",
         KeyKind::kScalar,
         "libpq URL or keyword string, no password",
         "— (required to run)",
         "`EngineConfig::database_url`, `ParticipantConfig::database_url`",
         [](ConfigReader& r, const YamlFields& f, C& c) { r.ReadDbUrl(f, c); },
         [](YAML::Emitter& out, const C& c) { out << store::RedactUrl(c.engine.database_url); }},
        {"db",
         "password",
         KeyKind::kScalar,
         "secret",
         "libpq's `PGPASSWORD`, `~/.pgpass`",
         "added to the URL",
         [](ConfigReader& r, const YamlFields& f, C& c) { r.ReadDbPassword(f, c); },
         nullptr},
        IntegerKey(
            "db",
            "pool_size",
            2,
            200,
            "`database_pool_size` (the engine's own work; with the HTTP API on, the pool has one more connection "
            "per `http.worker_threads`; the relay and the consumer have a connection each on top)",
            [](C& c, long long n) {
                c.engine.database_pool_size = c.participant.database_pool_size = static_cast<int>(n);
            },
            [](const C& c) { return c.engine.database_pool_size; },
            "engine 4, participant 2"),
        BoolKey(
            "db",
            "run_migrations",
            "`run_migrations`",
            [](C& c, bool b) { c.engine.run_migrations = c.participant.run_migrations = b; },
            [](const C& c) { return c.engine.run_migrations; }),
        // kafka
        StringKey(
            "kafka",
            "brokers",
            "host:port,...",
            "— (required to run)",
            "`kafka_brokers`",
            [](C& c, std::string v) { c.engine.kafka_brokers = c.participant.kafka_brokers = std::move(v); },
            [](const C& c) { return c.engine.kafka_brokers; }),
        StringKey(
            "kafka",
            "replies_topic",
            "topic name",
            {},
            "`replies_topic`",
            [](C& c, std::string v) { c.engine.replies_topic = c.participant.replies_topic = std::move(v); },
            [](const C& c) { return c.engine.replies_topic; },
            {kTopic, "letters, digits, '.', '_', '-'"}),
        IntegerKey(
            "kafka",
            "topic_partitions",
            1,
            10'000,
            "`topic_partitions` (topics sagaflow creates)",
            [](C& c, long long n) { c.engine.topic_partitions = c.participant.topic_partitions = static_cast<int>(n); },
            [](const C& c) { return c.engine.topic_partitions; }),
        IntegerKey(
            "kafka",
            "max_json_depth",
            2,
            1000,
            "`max_json_depth`: records (replies, commands) whose JSON nests deeper are dead-lettered unread",
            [](C& c, long long n) { c.engine.max_json_depth = c.participant.max_json_depth = static_cast<int>(n); },
            [](const C& c) { return c.engine.max_json_depth; }),
        BoolKey(
            "kafka",
            "create_topics",
            "`create_topics` (false: no admin rights)",
            [](C& c, bool b) { c.engine.create_topics = c.participant.create_topics = b; },
            [](const C& c) { return c.engine.create_topics; }),
        {"kafka",
         "properties",
         KeyKind::kMapping,
         "map; secrets as above",
         "—",
         "`kafka_properties`: librdkafka, every client (TLS, SASL)",
         [](ConfigReader& r, const YamlFields& f, C& c) {
             c.engine.kafka_properties = c.participant.kafka_properties = r.KafkaProperties(f, "properties", "kafka");
         },
         [](YAML::Emitter& out, const C& c) { ShowMap(out, c.engine.kafka_properties); }},
        {"kafka",
         "consumer_properties",
         KeyKind::kMapping,
         "map",
         "—",
         "`consumer_properties`: the consumers only (e.g. `fetch.wait.max.ms: 10` with `fetch.min.bytes: 8192` "
         "trades up to 10 ms per hop at low rates for fewer, fuller fetches under load)",
         [](ConfigReader& r, const YamlFields& f, C& c) {
             c.engine.consumer_properties = c.participant.consumer_properties =
                 r.KafkaProperties(f, "consumer_properties", "kafka");
         },
         [](YAML::Emitter& out, const C& c) { ShowMap(out, c.engine.consumer_properties); }},
        // engine
        StringKey(
            "engine",
            "instance_id",
            "string",
            "hostname-pid",
            "`EngineConfig::instance_id` (events' `source`; when set, also the reply consumer's "
            "`group.instance.id`: stable per replica, unique in the group)",
            [](C& c, std::string v) { c.engine.instance_id = std::move(v); },
            [](const C& c) { return c.engine.instance_id.empty() ? "(hostname-pid)" : c.engine.instance_id; }),
        StringKey(
            "engine",
            "consumer_group",
            "string",
            {},
            "`EngineConfig::consumer_group`",
            [](C& c, std::string v) { c.engine.consumer_group = std::move(v); },
            [](const C& c) { return c.engine.consumer_group; }),
        BoolKey(
            "engine",
            "static_membership",
            "`EngineConfig::static_membership`: the reply consumer joins as a static member, as `instance_id` or, "
            "unset, `<hostname>-<slot>` (outbox/README.md, \"Group membership\"); `sagaflow run "
            "--no-static-membership` turns it off",
            [](C& c, bool b) { c.engine.static_membership = b; },
            [](const C& c) { return c.engine.static_membership; }),
        {"engine",
         "participant_groups",
         KeyKind::kMapping,
         "map",
         "—",
         "`EngineConfig::participant_groups`: participant name → its consumer group, whose committed offsets tell "
         "the step timeouts when a command has been reached (default `sagaflow-participant-<name>`)",
         [](ConfigReader& r, const YamlFields& f, C& c) {
             c.engine.participant_groups = r.Names(f, "participant_groups", "engine", "payment: payments-consumers");
         },
         [](YAML::Emitter& out, const C& c) { ShowMap(out, c.engine.participant_groups); }},
        BoolKey(
            "engine",
            "process_sagas",
            "`EngineConfig::process_sagas` (false: an API front end)",
            [](C& c, bool b) { c.engine.process_sagas = b; },
            [](const C& c) { return c.engine.process_sagas; }),
        BoolKey(
            "engine",
            "run_relay",
            "`EngineConfig::run_relay`",
            [](C& c, bool b) { c.engine.run_relay = b; },
            [](const C& c) { return c.engine.run_relay; }),
        DurationKey(
            "engine",
            "timer_max_sleep",
            10ms,
            60'000ms,
            "`EngineConfig::timer_max_sleep`",
            [](C& c, milliseconds d) { c.engine.timer_max_sleep = d; },
            [](const C& c) { return c.engine.timer_max_sleep; }),
        {"engine",
         "history_retention_days",
         KeyKind::kScalar,
         "0, or 3–36500",
         "`0` (keep)",
         "`EngineConfig::history_retention`: finished sagas older than this are deleted by the daily sweep; at "
         "least 3 days, longer than every deduplication TTL",
         [](ConfigReader& r, const YamlFields& f, C& c) {
             const auto days = r.Integer(f, "history_retention_days", "engine", 0, 36'500);
             if (!days) return;
             if (*days == 0) {
                 c.engine.history_retention.reset();
             } else if (*days < 3) {
                 r.Error(r.MarkOf(f.at("history_retention_days")),
                         "engine.history_retention_days",
                         std::to_string(*days) +
                             " is too short: at least 3 days (longer than every deduplication TTL), or 0 to keep "
                             "finished sagas");
             } else {
                 c.engine.history_retention = std::chrono::hours(24 * *days);
             }
         },
         [](YAML::Emitter& out, const C& c) {
             out << (c.engine.history_retention ? c.engine.history_retention->count() / 24 : 0);
         }},
        {"engine",
         "sagas",
         KeyKind::kList,
         "list of files",
         "—",
         "`Config::sagas` (registered by `sagaflow run`); relative to the file's folder",
         [](ConfigReader& r, const YamlFields& f, C& c) { r.ReadSagas(f, c); },
         [](YAML::Emitter& out, const C& c) {
             out << YAML::BeginSeq;
             for (const auto& file : c.sagas) out << file.string();
             out << YAML::EndSeq;
         }},
        // http
        {"http",
         "listen",
         KeyKind::kScalar,
         "`ADDRESS:PORT`, `[v6]:PORT`; port 0: any",
         "absent: no HTTP API",
         "`HttpConfig::enabled`, `address`, `port`",
         [](ConfigReader& r, const YamlFields& f, C& c) {
             const auto listen = r.String(f, "listen", "http", {}, false);
             if (listen && !ParseListen(*listen, c.engine.http)) {
                 r.Error(r.MarkOf(f.at("listen")),
                         "http.listen",
                         "expected ADDRESS:PORT (e.g. 0.0.0.0:8080, [::1]:8080; port 0: any free port), found " +
                             text::Quote(*listen));
             }
         },
         [](YAML::Emitter& out, const C& c) {
             const auto& http = c.engine.http;
             const bool v6 = http.address.find(':') != std::string::npos;
             out << (http.enabled ? (v6 ? "[" + http.address + "]" : http.address) + ":" + std::to_string(http.port)
                                  : "(off)");
         }},
        IntegerKey(
            "http",
            "worker_threads",
            1,
            256,
            "`HttpConfig::worker_threads`",
            [](C& c, long long n) { c.engine.http.worker_threads = static_cast<int>(n); },
            [](const C& c) { return c.engine.http.worker_threads; }),
        IntegerKey(
            "http",
            "max_connections",
            1,
            100'000,
            "`HttpConfig::max_connections`",
            [](C& c, long long n) { c.engine.http.max_connections = static_cast<int>(n); },
            [](const C& c) { return c.engine.http.max_connections; }),
        IntegerKey(
            "http",
            "max_body_bytes",
            1024,
            64LL << 20,
            "`HttpConfig::max_body_bytes`",
            [](C& c, long long n) { c.engine.http.max_body_bytes = static_cast<std::size_t>(n); },
            [](const C& c) { return static_cast<long long>(c.engine.http.max_body_bytes); }),
        IntegerKey(
            "http",
            "max_json_depth",
            2,
            1000,
            "`HttpConfig::max_json_depth`: arrays and objects nested deeper in a body are refused with 400",
            [](C& c, long long n) { c.engine.http.max_json_depth = static_cast<int>(n); },
            [](const C& c) { return c.engine.http.max_json_depth; }),
        IntegerKey(
            "http",
            "max_header_bytes",
            1024,
            1LL << 20,
            "`HttpConfig::max_header_bytes`",
            [](C& c, long long n) { c.engine.http.max_header_bytes = static_cast<std::size_t>(n); },
            [](const C& c) { return static_cast<long long>(c.engine.http.max_header_bytes); }),
        DurationKey(
            "http",
            "io_timeout",
            1000ms,
            3'600'000ms,
            "`HttpConfig::io_timeout`: a request must arrive whole within it",
            [](C& c, milliseconds d) {
                c.engine.http.io_timeout = std::chrono::duration_cast<std::chrono::seconds>(d);
            },
            [](const C& c) { return milliseconds(c.engine.http.io_timeout); }),
        // Rule R-DIST-IDEM-5: idempotency records are kept 24 to 72 hours.
        DurationKey(
            "http",
            "idempotency_ttl",
            24h,
            72h,
            "`HttpConfig::idempotency_ttl` (R-DIST-IDEM-5)",
            [](C& c, milliseconds d) {
                c.engine.http.idempotency_ttl = std::chrono::duration_cast<std::chrono::hours>(d);
            },
            [](const C& c) { return milliseconds(c.engine.http.idempotency_ttl); }),
        BoolKey(
            "http",
            "allow_unauthenticated",
            "`HttpConfig::allow_unauthenticated`: without `tokens` the API starts only on a loopback address unless "
            "this is set (`--http-allow-unauthenticated`; logged as a warning); operator endpoints (list, retry, "
            "cancel) then still answer 403 `operator-token-required`",
            [](C& c, bool b) { c.engine.http.allow_unauthenticated = b; },
            [](const C& c) { return c.engine.http.allow_unauthenticated; }),
        {"http",
         "tokens",
         KeyKind::kMapping,
         "map client → secret",
         "— (no authentication)",
         "`HttpConfig::tokens`; `operator*` clients may list, retry and cancel",
         [](ConfigReader& r, const YamlFields& f, C& c) { r.ReadTokens(f, c); },
         [](YAML::Emitter& out, const C& c) {
             std::map<std::string, std::string> clients;
             for (const auto& [token, client] : c.engine.http.tokens) clients.emplace(client, token);
             ShowMap(out, clients, true);
         }},
        // participant
        StringKey(
            "participant",
            "name",
            "`[a-z][a-z0-9-]*`",
            "—",
            "`ParticipantConfig::name`",
            [](C& c, std::string v) { c.participant.name = std::move(v); },
            [](const C& c) { return c.participant.name; },
            {kName, "lowercase letters, digits and '-', as the definitions' participant:"}),
        StringKey(
            "participant",
            "schema",
            "SQL identifier",
            "the URL's search_path",
            "`ParticipantConfig::schema`",
            [](C& c, std::string v) { c.participant.schema = std::move(v); },
            [](const C& c) { return c.participant.schema; },
            {kSchema, "a lowercase SQL identifier (letters, digits, '_')"}),
        StringKey(
            "participant",
            "consumer_group",
            "string",
            "`sagaflow-participant-<name>`",
            "`ParticipantConfig::consumer_group`",
            [](C& c, std::string v) { c.participant.consumer_group = std::move(v); },
            [](const C& c) {
                const auto& p = c.participant;
                return p.consumer_group.empty() && !p.name.empty() ? "sagaflow-participant-" + p.name
                                                                   : p.consumer_group;
            }),
        BoolKey(
            "participant",
            "run_relay",
            "`ParticipantConfig::run_relay`",
            [](C& c, bool b) { c.participant.run_relay = b; },
            [](const C& c) { return c.participant.run_relay; }),
        // Rule R-DIST-IDEM-5: an inbox remembers an event 24 to 72 hours.
        DurationKey(
            "participant",
            "inbox_ttl",
            24h,
            72h,
            "`ParticipantConfig::inbox_ttl` (R-DIST-IDEM-5)",
            [](C& c, milliseconds d) { c.participant.inbox_ttl = std::chrono::duration_cast<std::chrono::hours>(d); },
            [](const C& c) { return milliseconds(c.participant.inbox_ttl); }),
    };
    return kKeys;
}

ConfigResult ConfigReader::Run(std::string_view text) {
    ConfigResult result;
    const auto parsed = Parse(text);
    if (!parsed) {
        result.diagnostics = TakeDiagnostics();
        return result;
    }
    // An empty file is a configuration of defaults (and environment variables).
    const YAML::Node root = parsed->IsNull() ? YAML::Node(YAML::NodeType::Map) : *parsed;
    const auto top = Map(root, root.Mark(), "", Sections());
    Config config;
    for (const auto section : top ? Sections() : std::vector<std::string_view>{}) {
        const auto fields = Section(*top, section);
        if (!fields) continue;
        for (const auto& key : Keys()) {
            if (key.section == section) key.read(*this, *fields, config);
        }
    }
    CheckEnvironment();
    if (diagnostics_.empty()) result.config = std::move(config);
    result.diagnostics = TakeDiagnostics();
    return result;
}

}  // namespace

bool ParseListen(std::string_view text, HttpConfig& http) {
    // ADDRESS:PORT or [IPv6]:PORT; the address has no ':', '[' or ']' unless it is bracketed.
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos || !text::IsDigits(text.substr(colon + 1), 5)) return false;
    const int port = std::stoi(std::string(text.substr(colon + 1)));
    std::string_view address = text.substr(0, colon);
    if (port > 65535 || address.empty() || address.size() > 255) return false;  // DNS names end at 253
    if (address.front() == '[') {
        if (address.size() < 3 || address.back() != ']') return false;
        address = address.substr(1, address.size() - 2);
        const auto ipv6 = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.'; };
        if (!std::all_of(address.begin(), address.end(), ipv6)) return false;
    } else if (address.find_first_of(":[]") != std::string_view::npos) {
        return false;
    }
    http.enabled = true;
    http.address = std::string(address);
    http.port = port;
    return true;
}

ConfigResult LoadConfigString(std::string_view text,
                              std::string_view source_name,
                              const Environment& env,
                              const std::filesystem::path& base_dir) {
    return ConfigReader(std::string(source_name), env, base_dir).Run(text);
}

ConfigResult LoadConfigFile(const std::filesystem::path& path, const Environment& env) {
    ConfigResult result;
    const auto text = detail::ReadDocumentFile(path, ConfigKind(), result.diagnostics);
    if (!text) return result;
    return LoadConfigString(*text, path.string(), env, path.parent_path());
}

ConfigResult LoadConfigOrDefaults(const std::filesystem::path& path, const Environment& env) {
    return path.empty() ? LoadConfigString("", "(no configuration file)", env, std::filesystem::current_path())
                        : LoadConfigFile(path, env);
}

std::string Config::WithDbPassword(const std::string& url) const {
    return db_password.empty() || store::RedactUrl(url) != url ? url : WithPassword(url, db_password);
}

Config Config::FromFile(const std::filesystem::path& path, const Environment& env) {
    auto result = LoadConfigFile(path, env);
    if (!result.config) throw ConfigError(std::move(result.diagnostics));
    return std::move(*result.config);
}

std::string Config::Describe() const {
    YAML::Emitter out;
    out << YAML::BeginMap;
    for (const auto section : Sections()) {
        out << YAML::Key << std::string(section) << YAML::Value << YAML::BeginMap;
        for (const auto& key : Keys()) {
            if (key.section != section || !key.show) continue;
            out << YAML::Key << std::string(key.name) << YAML::Value;
            key.show(out, *this);
        }
        out << YAML::EndMap;
    }
    out << YAML::EndMap;
    return std::string(out.c_str()) + "\n";
}

std::string ConfigKeysMarkdown() {
    std::string out = "| key | variable | type, range | default | sets |\n|---|---|---|---|---|\n";
    const Config defaults;
    for (const auto& key : Keys()) {
        std::string fallback = key.fallback;
        if (fallback.empty()) {
            YAML::Emitter value;
            key.show(value, defaults);
            fallback = "`" + std::string(value.c_str()) + "`";
        }
        out += "| `" + key.Path() + "` | `" + key.Variable() + "` | " + key.type + " | " + fallback + " | " + key.sets +
               " |\n";
    }
    return out;
}

}  // namespace sagaflow
