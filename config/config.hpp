#pragma once
// The configuration file: one YAML file for `sagaflow run --config` and for services that embed
// the engine or a participant. config/README.md lists every key (ConfigKeysMarkdown());
// examples/sagaflow.yaml sets each of them and is loaded by the tests, so it stays valid.
//
//     const auto config = sagaflow::Config::FromFile("/etc/sagaflow/sagaflow.yaml");  // ConfigError
//     sagaflow::Engine engine{config.engine};
//     for (const auto& file : config.sagas) engine.RegisterDefinitionFile(file);
//
// Read with the definitions' error quality: unknown keys refused with the allowed ones, every
// problem reported at once as file:line:col. Precedence, highest first: SAGAFLOW_<SECTION>_<KEY>
// environment variables (single keys, e.g. SAGAFLOW_DB_URL, SAGAFLOW_HTTP_LISTEN), the file,
// the defaults of EngineConfig / ParticipantConfig. Secrets (db.password, http.tokens, Kafka
// properties whose name holds "password" or "secret", ssl.key.pem) are never written into the
// file: their value is `{env: VARIABLE}` or `{file: PATH}`, read when the file is loaded, and
// Describe() prints them as ***.

#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/definition_loader.hpp"
#include "engine/engine.hpp"
#include "participant/participant.hpp"

namespace sagaflow {

// Environment variables by name (the process's: ProcessEnvironment()).
using Environment = std::map<std::string, std::string>;
Environment ProcessEnvironment();

// A configuration file may be at most this large.
inline constexpr std::size_t kMaxConfigBytes = 256 << 10;

struct Config {
    EngineConfig engine;            // db, kafka, engine and http sections
    ParticipantConfig participant;  // db, kafka and participant sections (a participant's service)
    // engine.sagas: definition files to register, relative paths resolved against the file's folder.
    std::vector<std::filesystem::path> sagas;
    // db.password as read (empty: none). Already in the URLs above; kept for a URL given on the
    // command line instead of db.url. Never printed.
    std::string db_password;

    // `url` with db.password added (unless `url` holds a password of its own): a --db flag
    // replaces db.url, not the password.
    std::string WithDbPassword(const std::string& url) const;

    // Throws ConfigError holding every diagnostic.
    static Config FromFile(const std::filesystem::path& path, const Environment& env = ProcessEnvironment());

    // The effective configuration as YAML (every key, defaults included), secrets as ***.
    std::string Describe() const;
};

struct ConfigResult {
    std::optional<Config> config;  // set exactly when `diagnostics` is empty
    std::vector<Diagnostic> diagnostics;
};

// `base_dir` resolves relative paths (engine.sagas, {file: ...} secrets).
ConfigResult LoadConfigString(std::string_view text,
                              std::string_view source_name,
                              const Environment& env,
                              const std::filesystem::path& base_dir);
ConfigResult LoadConfigFile(const std::filesystem::path& path, const Environment& env = ProcessEnvironment());
// The file's configuration, or with an empty path the defaults; the SAGAFLOW_* variables applied
// either way (what a command with an optional --config reads).
ConfigResult LoadConfigOrDefaults(const std::filesystem::path& path, const Environment& env = ProcessEnvironment());

// Every key as the Markdown table in config/README.md: name, environment variable, type and
// range, default, what it sets (`sagaflow config --keys`). The same table reads the file and
// prints Describe(), so the README cannot list a key the reader does not know.
std::string ConfigKeysMarkdown();

// "ADDRESS:PORT" (an IPv6 address in brackets: "[::1]:8080"; port 0: any free port) as the HTTP
// API's address and port; false if it is not one. `http.listen` and `sagaflow run --http`.
bool ParseListen(std::string_view text, HttpConfig& http);

class ConfigError : public std::runtime_error {
  public:
    explicit ConfigError(std::vector<Diagnostic> diagnostics);
    const std::vector<Diagnostic>& Diagnostics() const noexcept { return diagnostics_; }

  private:
    std::vector<Diagnostic> diagnostics_;
};

}  // namespace sagaflow
