#include "config/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>
#include <sstream>

#include "core/detail/yaml_reader.hpp"
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

class ConfigReader : public detail::YamlReader {
  public:
    ConfigReader(std::string file, const Environment& env, std::filesystem::path base_dir)
        : YamlReader(std::move(file), ConfigKind()), env_(env), base_dir_(std::move(base_dir)) {}

    ConfigResult Run(std::string_view text);

  private:
    // The section's keys. Each has a variable SAGAFLOW_<SECTION>_<KEY> that, when set, overrides
    // it: a scalar's replaces the value; a mapping's ("name=value;name=value") sets those entries
    // over the file's (EnvEntries); a list's ("a,b") replaces the list.
    std::optional<YamlFields> Section(const YamlFields& root,
                                      const std::string& name,
                                      const std::vector<std::string_view>& scalars,
                                      const std::vector<std::string_view>& maps,
                                      const std::vector<std::string_view>& lists = {});
    // The entries a mapping's variable sets, in its order (empty when it is not set).
    const std::vector<std::pair<std::string, std::string>>& EnvEntries(const std::string& path) const;
    // `{env: NAME}` or `{file: PATH}`; a plain value only from an environment variable.
    std::optional<std::string> Secret(const YamlFields& fields, std::string_view key, const std::string& path);
    std::optional<std::string> SecretFrom(const YamlEntry& entry, const std::string& path);
    std::map<std::string, std::string> KafkaProperties(const YamlFields& fields,
                                                       std::string_view key,
                                                       const std::string& path);
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
    // A mapping of plain names to plain strings (`example` shows one entry in the error).
    std::map<std::string, std::string> Names(const YamlFields& fields,
                                             std::string_view key,
                                             const std::string& parent,
                                             const std::string& example);

    void ReadDb(const YamlFields& root, Config& config);
    void ReadKafka(const YamlFields& root, Config& config);
    void ReadEngine(const YamlFields& root, Config& config);
    void ReadHttp(const YamlFields& root, Config& config);
    void ReadParticipant(const YamlFields& root, Config& config);
    void CheckEnvironment();

    const Environment& env_;
    std::filesystem::path base_dir_;
    std::vector<std::string> known_env_;
    std::map<std::string, std::vector<std::string>> section_keys_;  // "SAGAFLOW_DB_" -> {"URL", ...}
    std::set<std::string> from_env_;                                // paths whose value came from the environment
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> env_entries_;  // mapping path -> entries
};

std::optional<YamlFields> ConfigReader::Section(const YamlFields& root,
                                                const std::string& name,
                                                const std::vector<std::string_view>& scalars,
                                                const std::vector<std::string_view>& maps,
                                                const std::vector<std::string_view>& lists) {
    YamlFields fields;
    if (const auto it = root.find(name); it != root.end() && !it->second.value.IsNull()) {
        std::vector<std::string_view> allowed = scalars;
        allowed.insert(allowed.end(), maps.begin(), maps.end());
        allowed.insert(allowed.end(), lists.begin(), lists.end());
        auto read = Map(it->second.value, MarkOf(it->second), name, allowed);
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
        const std::string path = Join(name, key);
        fields[std::string(key)] = YamlEntry{YAML::Node(std::string(key)), YAML::Node(*text)};
        SetOrigin(path, "$" + known_env_.back());
        from_env_.insert(path);
    }
    for (const auto key : maps) {
        const auto text = variable_of(key);
        if (!text) continue;
        const std::string variable = known_env_.back();
        const std::string path = Join(name, key);
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
        const std::string path = Join(name, key);
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

void ConfigReader::ReadDb(const YamlFields& root, Config& config) {
    const auto db = Section(root, "db", {"url", "password", "pool_size", "run_migrations"}, {});
    if (!db) return;
    auto url = String(*db, "url", "db", {}, false);
    if (url && store::RedactUrl(*url) != *url && from_env_.count("db.url") == 0) {
        Error(MarkOf(db->at("url")),
              "db.url",
              "the URL holds a password: move it to db.password as {env: VARIABLE} or {file: PATH} (or set "
              "SAGAFLOW_DB_URL in the environment)");
        url.reset();
    }
    const auto password = Secret(*db, "password", "db");
    if (password) config.db_password = *password;
    if (password && url) {
        if (store::RedactUrl(*url) != *url) {
            Error(MarkOf(db->at("password")), "db.password", "db.url holds a password too: keep one of them");
        } else {
            url = WithPassword(*url, *password);
        }
    }
    if (url) config.engine.database_url = config.participant.database_url = *url;
    if (const auto n = Integer(*db, "pool_size", "db", 2, 200)) {
        config.engine.database_pool_size = config.participant.database_pool_size = static_cast<int>(*n);
    }
    if (const auto b = Bool(*db, "run_migrations", "db"))
        config.engine.run_migrations = config.participant.run_migrations = *b;
}

void ConfigReader::ReadKafka(const YamlFields& root, Config& config) {
    const auto kafka = Section(root,
                               "kafka",
                               {"brokers", "replies_topic", "topic_partitions", "create_topics"},
                               {"properties", "consumer_properties"});
    if (!kafka) return;
    static const std::regex kTopic{"[A-Za-z0-9._-]{1,249}"};
    if (const auto v = String(*kafka, "brokers", "kafka", {}, false)) {
        config.engine.kafka_brokers = config.participant.kafka_brokers = *v;
    }
    if (const auto v = String(*kafka, "replies_topic", "kafka", {}, false, &kTopic, "letters, digits, '.', '_', '-'")) {
        config.engine.replies_topic = config.participant.replies_topic = *v;
    }
    if (const auto n = Integer(*kafka, "topic_partitions", "kafka", 1, 10'000)) {
        config.engine.topic_partitions = config.participant.topic_partitions = static_cast<int>(*n);
    }
    if (const auto b = Bool(*kafka, "create_topics", "kafka"))
        config.engine.create_topics = config.participant.create_topics = *b;
    config.engine.kafka_properties = config.participant.kafka_properties =
        KafkaProperties(*kafka, "properties", "kafka");
    config.engine.consumer_properties = config.participant.consumer_properties =
        KafkaProperties(*kafka, "consumer_properties", "kafka");
}

void ConfigReader::ReadEngine(const YamlFields& root, Config& config) {
    const auto engine = Section(root,
                                "engine",
                                {"instance_id",
                                 "consumer_group",
                                 "static_membership",
                                 "process_sagas",
                                 "run_relay",
                                 "timer_max_sleep",
                                 "history_retention_days"},
                                {"participant_groups"},
                                {"sagas"});
    if (!engine) return;
    auto& out = config.engine;
    if (const auto v = String(*engine, "instance_id", "engine", {}, false)) out.instance_id = *v;
    if (const auto v = String(*engine, "consumer_group", "engine", {}, false)) out.consumer_group = *v;
    if (const auto b = Bool(*engine, "static_membership", "engine")) out.static_membership = *b;
    out.participant_groups = Names(*engine, "participant_groups", "engine", "payment: payments-consumers");
    if (const auto b = Bool(*engine, "process_sagas", "engine")) out.process_sagas = *b;
    if (const auto b = Bool(*engine, "run_relay", "engine")) out.run_relay = *b;
    if (const auto d = Duration(*engine, "timer_max_sleep", "engine", 10ms, 60'000ms)) out.timer_max_sleep = *d;
    // 0 keeps finished sagas; otherwise at least 3 days (longer than every deduplication TTL).
    if (const auto days = Integer(*engine, "history_retention_days", "engine", 0, 36'500)) {
        if (*days == 0) {
            out.history_retention.reset();
        } else if (*days < 3) {
            Error(MarkOf(engine->at("history_retention_days")),
                  "engine.history_retention_days",
                  std::to_string(*days) +
                      " is too short: at least 3 days (longer than every deduplication TTL), or 0 to keep finished "
                      "sagas");
        } else {
            out.history_retention = std::chrono::hours(24 * *days);
        }
    }
    if (const auto sagas = engine->find("sagas"); sagas != engine->end() && !sagas->second.value.IsNull()) {
        if (!sagas->second.value.IsSequence()) {
            Error(MarkOf(sagas->second), "engine.sagas", "expected a list of saga definition files");
        } else {
            std::size_t i = 0;
            for (const auto& item : sagas->second.value) {
                const std::string path = "engine.sagas[" + std::to_string(i++) + "]";
                if (!item.IsScalar()) {
                    Error(item.Mark(), path, "expected a file's path, found " + std::string(detail::KindOfNode(item)));
                    continue;
                }
                // Relative paths: from the file's directory, or the working one for SAGAFLOW_ENGINE_SAGAS.
                const auto file = (from_env_.count("engine.sagas") != 0 ? std::filesystem::current_path() : base_dir_) /
                                  item.Scalar();
                std::error_code ec;
                if (!std::filesystem::is_regular_file(file, ec)) {
                    Error(item.Mark(), path, "no such file: " + file.string());
                    continue;
                }
                config.sagas.push_back(file.lexically_normal());
            }
        }
    }
}

void ConfigReader::ReadHttp(const YamlFields& root, Config& config) {
    const auto http = Section(root,
                              "http",
                              {"listen",
                               "worker_threads",
                               "max_connections",
                               "max_body_bytes",
                               "max_header_bytes",
                               "io_timeout",
                               "idempotency_ttl",
                               "allow_unauthenticated"},
                              {"tokens"});
    if (!http) return;
    auto& out = config.engine.http;
    if (const auto listen = String(*http, "listen", "http", {}, false); listen && !ParseListen(*listen, out)) {
        Error(MarkOf(http->at("listen")),
              "http.listen",
              "expected ADDRESS:PORT (e.g. 0.0.0.0:8080, [::1]:8080; port 0: any free port), found '" + *listen + "'");
    }
    if (const auto n = Integer(*http, "worker_threads", "http", 1, 256)) out.worker_threads = static_cast<int>(*n);
    if (const auto n = Integer(*http, "max_connections", "http", 1, 100'000))
        out.max_connections = static_cast<int>(*n);
    if (const auto n = Integer(*http, "max_body_bytes", "http", 1024, 64LL << 20)) {
        out.max_body_bytes = static_cast<std::size_t>(*n);
    }
    if (const auto n = Integer(*http, "max_header_bytes", "http", 1024, 1LL << 20)) {
        out.max_header_bytes = static_cast<std::size_t>(*n);
    }
    if (const auto d = Duration(*http, "io_timeout", "http", 1000ms, 3'600'000ms)) {
        out.io_timeout = std::chrono::duration_cast<std::chrono::seconds>(*d);
    }
    if (const auto b = Bool(*http, "allow_unauthenticated", "http")) out.allow_unauthenticated = *b;
    // Rule R-DIST-IDEM-5: idempotency records are kept 24 to 72 hours.
    if (const auto d = Duration(*http, "idempotency_ttl", "http", 24h, 72h)) {
        out.idempotency_ttl = std::chrono::duration_cast<std::chrono::hours>(*d);
    }
    const auto add_token = [&](const std::string& client, const std::string& token, const YAML::Mark& mark) {
        const std::string path = Join("http.tokens", client);
        if (const auto [it, fresh] = out.tokens.emplace(token, client); !fresh) {
            Error(mark, path, "the same token as client '" + it->second + "': give each client its own");
        }
    };
    if (const auto tokens = http->find("tokens"); tokens != http->end() && !tokens->second.value.IsNull()) {
        if (!tokens->second.value.IsMap()) {
            Error(MarkOf(tokens->second),
                  "http.tokens",
                  "expected a mapping of client names to tokens, e.g. operator-alice: {env: ALICE_TOKEN}");
            return;
        }
        for (auto t = tokens->second.value.begin(); t != tokens->second.value.end(); ++t) {
            if (!t->first.IsScalar()) {
                Error(t->first.Mark(), "http.tokens", "a client's name must be a plain name");
                continue;
            }
            const std::string client = t->first.Scalar();
            if (from_env_.count(Join("http.tokens", client)) != 0) continue;  // the environment's token replaces it
            if (const auto token = SecretFrom(YamlEntry{t->first, t->second}, Join("http.tokens", client))) {
                add_token(client, *token, t->first.Mark());
            }
        }
    }
    for (const auto& [client, token] : EnvEntries("http.tokens")) add_token(client, token, YAML::Mark::null_mark());
}

void ConfigReader::ReadParticipant(const YamlFields& root, Config& config) {
    const auto participant =
        Section(root, "participant", {"name", "schema", "consumer_group", "run_relay", "inbox_ttl"}, {});
    if (!participant) return;
    auto& out = config.participant;
    static const std::regex kName{"[a-z][a-z0-9-]{0,62}"};
    static const std::regex kSchema{"[a-z_][a-z0-9_]{0,62}"};
    if (const auto v = String(*participant,
                              "name",
                              "participant",
                              {},
                              false,
                              &kName,
                              "lowercase letters, digits and '-', as the definitions' participant:")) {
        out.name = *v;
    }
    if (const auto v = String(*participant,
                              "schema",
                              "participant",
                              {},
                              false,
                              &kSchema,
                              "a lowercase SQL identifier (letters, digits, '_')")) {
        out.schema = *v;
    }
    if (const auto v = String(*participant, "consumer_group", "participant", {}, false)) out.consumer_group = *v;
    if (const auto b = Bool(*participant, "run_relay", "participant")) out.run_relay = *b;
    // Rule R-DIST-IDEM-5: an inbox remembers an event 24 to 72 hours.
    if (const auto d = Duration(*participant, "inbox_ttl", "participant", 24h, 72h)) {
        out.inbox_ttl = std::chrono::duration_cast<std::chrono::hours>(*d);
    }
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
            diagnostics_.push_back({"$" + name,
                                    0,
                                    0,
                                    "",
                                    "not a configuration variable (did you mean '" + prefix + key +
                                        "'?); the variables are SAGAFLOW_<SECTION>_<KEY>, listed in engine/README.md"});
        }
    }
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
    const auto top = Map(root, root.Mark(), "", {"db", "kafka", "engine", "http", "participant"});
    Config config;
    if (top) {
        ReadDb(*top, config);
        ReadKafka(*top, config);
        ReadEngine(*top, config);
        ReadHttp(*top, config);
        ReadParticipant(*top, config);
    }
    CheckEnvironment();
    if (diagnostics_.empty()) result.config = std::move(config);
    result.diagnostics = TakeDiagnostics();
    return result;
}

}  // namespace

bool ParseListen(std::string_view text, HttpConfig& http) {
    static const std::regex kListen{R"((\[[0-9A-Fa-f:.]+\]|[^:\[\]]+):([0-9]{1,5}))"};
    std::match_results<std::string_view::const_iterator> match;
    if (!std::regex_match(text.begin(), text.end(), match, kListen) || std::stoi(match[2].str()) > 65535) return false;
    std::string address = match[1].str();
    if (address.front() == '[') address = address.substr(1, address.size() - 2);
    http.enabled = true;
    http.address = address;
    http.port = std::stoi(match[2].str());
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
    const auto properties = [&](const std::map<std::string, std::string>& map) {
        out << YAML::BeginMap;
        for (const auto& [key, value] : map)
            out << YAML::Key << key << YAML::Value << (IsSecretProperty(key) ? "***" : value);
        out << YAML::EndMap;
    };
    const auto hours = [](std::chrono::hours h) { return std::to_string(h.count()) + "h"; };
    out << YAML::BeginMap;
    out << YAML::Key << "db" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "url" << YAML::Value << store::RedactUrl(engine.database_url);
    out << YAML::Key << "pool_size" << YAML::Value << engine.database_pool_size;
    out << YAML::Key << "run_migrations" << YAML::Value << engine.run_migrations;
    out << YAML::EndMap;
    out << YAML::Key << "kafka" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "brokers" << YAML::Value << engine.kafka_brokers;
    out << YAML::Key << "replies_topic" << YAML::Value << engine.replies_topic;
    out << YAML::Key << "topic_partitions" << YAML::Value << engine.topic_partitions;
    out << YAML::Key << "create_topics" << YAML::Value << engine.create_topics;
    out << YAML::Key << "properties" << YAML::Value;
    properties(engine.kafka_properties);
    out << YAML::Key << "consumer_properties" << YAML::Value;
    properties(engine.consumer_properties);
    out << YAML::EndMap;
    out << YAML::Key << "engine" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "instance_id" << YAML::Value
        << (engine.instance_id.empty() ? "(hostname-pid)" : engine.instance_id);
    out << YAML::Key << "consumer_group" << YAML::Value << engine.consumer_group;
    out << YAML::Key << "static_membership" << YAML::Value << engine.static_membership;
    out << YAML::Key << "participant_groups" << YAML::Value << YAML::BeginMap;
    for (const auto& [name, group] : engine.participant_groups) {
        out << YAML::Key << name << YAML::Value << group;
    }
    out << YAML::EndMap;
    out << YAML::Key << "process_sagas" << YAML::Value << engine.process_sagas;
    out << YAML::Key << "run_relay" << YAML::Value << engine.run_relay;
    out << YAML::Key << "timer_max_sleep" << YAML::Value << detail::FormatDuration(engine.timer_max_sleep);
    out << YAML::Key << "history_retention_days" << YAML::Value
        << (engine.history_retention ? engine.history_retention->count() / 24 : 0);
    out << YAML::Key << "sagas" << YAML::Value << YAML::BeginSeq;
    for (const auto& file : sagas) out << file.string();
    out << YAML::EndSeq << YAML::EndMap;
    out << YAML::Key << "http" << YAML::Value << YAML::BeginMap;
    const bool v6 = engine.http.address.find(':') != std::string::npos;
    out << YAML::Key << "listen" << YAML::Value
        << (engine.http.enabled
                ? (v6 ? "[" + engine.http.address + "]" : engine.http.address) + ":" + std::to_string(engine.http.port)
                : "(off)");
    out << YAML::Key << "worker_threads" << YAML::Value << engine.http.worker_threads;
    out << YAML::Key << "max_connections" << YAML::Value << engine.http.max_connections;
    out << YAML::Key << "max_body_bytes" << YAML::Value << engine.http.max_body_bytes;
    out << YAML::Key << "max_header_bytes" << YAML::Value << engine.http.max_header_bytes;
    out << YAML::Key << "io_timeout" << YAML::Value << std::to_string(engine.http.io_timeout.count()) + "s";
    out << YAML::Key << "idempotency_ttl" << YAML::Value << hours(engine.http.idempotency_ttl);
    out << YAML::Key << "allow_unauthenticated" << YAML::Value << engine.http.allow_unauthenticated;
    out << YAML::Key << "tokens" << YAML::Value << YAML::BeginMap;
    for (const auto& [token, client] : engine.http.tokens) out << YAML::Key << client << YAML::Value << "***";
    out << YAML::EndMap << YAML::EndMap;
    out << YAML::Key << "participant" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << participant.name;
    out << YAML::Key << "schema" << YAML::Value << participant.schema;
    out << YAML::Key << "consumer_group" << YAML::Value
        << (participant.consumer_group.empty() && !participant.name.empty() ? "sagaflow-participant-" + participant.name
                                                                            : participant.consumer_group);
    out << YAML::Key << "run_relay" << YAML::Value << participant.run_relay;
    out << YAML::Key << "inbox_ttl" << YAML::Value << hours(participant.inbox_ttl);
    out << YAML::EndMap << YAML::EndMap;
    return std::string(out.c_str()) + "\n";
}

}  // namespace sagaflow
