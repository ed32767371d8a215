// The configuration file: what every key sets, how the environment overrides it, how secrets are
// read and kept out of the file and out of what is printed, and the exact text and position of each
// class of error.
#include <doctest/doctest.h>
#include <libpq-fe.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "tests/support/print.hpp"

using sagaflow::Config;
using sagaflow::Environment;
using sagaflow::LoadConfigString;

namespace {

using Lines = std::vector<std::string>;

Lines Errors(const std::string& yaml, const Environment& env = {}, const std::filesystem::path& base = ".") {
    Lines out;
    for (const auto& d : LoadConfigString(yaml, "c.yaml", env, base).diagnostics) out.push_back(d.ToString());
    return out;
}

Config Load(const std::string& yaml, const Environment& env = {}, const std::filesystem::path& base = ".") {
    auto result = LoadConfigString(yaml, "c.yaml", env, base);
    for (const auto& d : result.diagnostics) MESSAGE(d.ToString());
    REQUIRE(result.config);
    return *result.config;
}

// libpq's reading of a connection string's password: what the server would be sent.
std::string LibpqPassword(const std::string& url) {
    char* error = nullptr;
    PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
    if (options == nullptr) {
        const std::string text = error != nullptr ? error : "?";
        PQfreemem(error);
        FAIL("libpq cannot parse the URL: " << text);
    }
    std::string password;
    for (auto* o = options; o->keyword != nullptr; ++o) {
        if (std::string(o->keyword) == "password" && o->val != nullptr) password = o->val;
    }
    PQconninfoFree(options);
    return password;
}

std::filesystem::path SourceDir() {
    const char* dir = std::getenv("SAGAFLOW_SOURCE_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "SAGAFLOW_SOURCE_DIR is not set: run this test through ctest");
    return dir;
}

struct TempDir {
    TempDir() {
        path = std::filesystem::temp_directory_path() / ("sagaflow-config-test-" + std::to_string(::getpid()));
        std::filesystem::create_directories(path);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    void Write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
    std::filesystem::path path;
};

}  // namespace

TEST_CASE("the documented example sets every key, and sagaflow config prints it back without its secrets") {
    const auto dir = SourceDir() / "examples/config";
    const Environment env{{"DB_PASSWORD", "p@ss w0rd&x='y'"}, {"ALICE_TOKEN", "alice-token-1"}};
    auto result = sagaflow::LoadConfigFile(dir / "sagaflow.yaml", env);
    for (const auto& d : result.diagnostics) MESSAGE(d.ToString());
    REQUIRE(result.config);
    const Config& c = *result.config;
    const auto& e = c.engine;
    CHECK(LibpqPassword(e.database_url) == "p@ss w0rd&x='y'");
    CHECK(e.database_url.rfind("postgresql://sagaflow@127.0.0.1:5432/sagaflow?password=", 0) == 0);
    CHECK(e.database_pool_size == 4);
    CHECK(e.run_migrations);
    CHECK(e.kafka_brokers == "127.0.0.1:9092");
    CHECK(e.replies_topic == "sagaflow.replies");
    CHECK(e.topic_partitions == 6);
    CHECK(e.create_topics);
    CHECK(e.kafka_properties ==
          std::map<std::string, std::string>{{"client.id", "sagaflow"}, {"security.protocol", "plaintext"}});
    CHECK(e.consumer_properties == std::map<std::string, std::string>{{"session.timeout.ms", "10000"}});
    CHECK(e.instance_id.empty());  // the example leaves it to each replica (a shared one would fence)
    CHECK(e.consumer_group == "sagaflow-engine");
    CHECK(e.static_membership);
    CHECK(e.participant_groups == std::map<std::string, std::string>{{"payment", "sagaflow-participant-payment"}});
    CHECK(e.process_sagas);
    CHECK(e.run_relay);
    CHECK(e.timer_max_sleep == std::chrono::seconds(1));
    REQUIRE(e.history_retention);
    CHECK(*e.history_retention == std::chrono::hours(720));
    REQUIRE(c.sagas.size() == 1);
    CHECK(std::filesystem::equivalent(c.sagas[0], SourceDir() / "sagas/order-payment.yaml"));
    CHECK(e.http.enabled);
    CHECK(e.http.address == "127.0.0.1");
    CHECK(e.http.port == 8080);
    CHECK(e.http.worker_threads == 4);
    CHECK(e.http.max_connections == 256);
    CHECK(e.http.max_body_bytes == 1048576);
    CHECK(e.http.max_header_bytes == 16384);
    CHECK(e.http.max_json_depth == 64);
    CHECK(e.http.io_timeout == std::chrono::seconds(30));
    CHECK(e.http.idempotency_ttl == std::chrono::hours(48));
    // Token -> client; the file's trailing newline is not part of the token.
    CHECK(e.http.tokens ==
          std::map<std::string, std::string>{{"alice-token-1", "operator-alice"}, {"example-shop-token", "shop"}});
    const auto& p = c.participant;
    CHECK(p.name == "payment");
    CHECK(p.schema == "payments");
    CHECK(p.consumer_group == "sagaflow-participant-payment");
    CHECK(p.run_relay);
    CHECK(p.inbox_ttl == std::chrono::hours(48));
    CHECK(p.database_url == e.database_url);  // db and kafka are shared
    CHECK(p.kafka_brokers == e.kafka_brokers);
    CHECK(p.consumer_properties == e.consumer_properties);

    const std::string printed = c.Describe();
    CHECK(printed.find("p@ss") == std::string::npos);
    CHECK(printed.find("p%40ss") == std::string::npos);
    CHECK(printed.find("alice-token-1") == std::string::npos);
    CHECK(printed.find("example-shop-token") == std::string::npos);
    CHECK(printed.find("password=***") != std::string::npos);
    CHECK(printed.find("operator-alice: \"***\"") != std::string::npos);
    // What is printed is itself a valid configuration of the same keys (secrets aside).
    CHECK(printed.find("history_retention_days: 30") != std::string::npos);
    CHECK(printed.find("listen: 127.0.0.1:8080") != std::string::npos);
}

TEST_CASE("an empty file is the defaults of EngineConfig and ParticipantConfig") {
    const Config c = Load("");
    const sagaflow::EngineConfig defaults;
    CHECK(c.engine.database_url.empty());
    CHECK(c.engine.database_pool_size == defaults.database_pool_size);
    CHECK(c.engine.consumer_group == defaults.consumer_group);
    CHECK(c.engine.replies_topic == defaults.replies_topic);
    CHECK(!c.engine.http.enabled);
    CHECK(!c.engine.history_retention);
    CHECK(c.participant.database_pool_size == sagaflow::ParticipantConfig{}.database_pool_size);
    CHECK(c.sagas.empty());
}

TEST_CASE("unknown keys are refused at their position, with the allowed ones and a suggestion, all at once") {
    CHECK(Errors("db:\n  url: postgresql://h/d\n  pool_sise: 3\nkafk:\n  brokers: b:9092\n") ==
          Lines{"c.yaml:3:3: error: db.pool_sise: unknown key 'pool_sise' (did you mean 'pool_size'?); allowed "
                "here: url, password, pool_size, run_migrations",
                "c.yaml:4:1: error: kafk: unknown key 'kafk' (did you mean 'kafka'?); allowed here: db, kafka, "
                "engine, http, participant"});
    CHECK(Errors("http:\n  listen: 127.0.0.1:80\n  token: {}\n") ==
          Lines{"c.yaml:3:3: error: http.token: unknown key 'token' (did you mean 'tokens'?); allowed here: listen, "
                "worker_threads, max_connections, max_body_bytes, max_json_depth, max_header_bytes, io_timeout, "
                "idempotency_ttl, "
                "allow_unauthenticated, tokens"});
}

TEST_CASE("values are checked against their type and range") {
    CHECK(Errors("db:\n  pool_size: many\n  run_migrations: yes\n") ==
          Lines{"c.yaml:2:14: error: db.pool_size: expected an integer, found 'many'",
                "c.yaml:3:19: error: db.run_migrations: expected true or false, found 'yes'"});
    CHECK(Errors("http:\n  idempotency_ttl: 12h\n") ==
          Lines{"c.yaml:2:20: error: http.idempotency_ttl: duration 12h is out of range: allowed 24h to 72h"});
    CHECK(Errors("participant:\n  inbox_ttl: 96h\n") ==
          Lines{"c.yaml:2:14: error: participant.inbox_ttl: duration 96h is out of range: allowed 24h to 72h"});
    CHECK(Errors("engine:\n  history_retention_days: 2\n") ==
          Lines{"c.yaml:2:27: error: engine.history_retention_days: 2 is too short: at least 3 days (longer than "
                "every deduplication TTL), or 0 to keep finished sagas"});
    CHECK(Errors("http:\n  listen: 8080\n") ==
          Lines{"c.yaml:2:11: error: http.listen: expected ADDRESS:PORT (e.g. 0.0.0.0:8080, [::1]:8080; port 0: any "
                "free port), found '8080'"});
    CHECK(Errors("engine:\n  sagas: [missing.yaml]\n") ==
          Lines{"c.yaml:2:11: error: engine.sagas[0]: no such file: ./missing.yaml"});
    CHECK(Errors("kafka:\n  properties:\n    no.such.property: 1\n    session.timeout.ms: abc\n") ==
          Lines{"c.yaml:3:23: error: kafka.properties.no.such.property: librdkafka refuses it: No such configuration "
                "property: \"no.such.property\"",
                "c.yaml:4:25: error: kafka.properties.session.timeout.ms: librdkafka refuses it: Invalid value for "
                "configuration property \"session.timeout.ms\""});
    const Config v6 = Load("http:\n  listen: '[::1]:0'\n");
    CHECK(v6.engine.http.address == "::1");
    CHECK(v6.engine.http.port == 0);
}

TEST_CASE("secrets come from the environment or a file, never from the file itself") {
    CHECK(Errors("db:\n  password: hunter2\n") ==
          Lines{"c.yaml:2:13: error: db.password: a secret is not written into the configuration file: write {env: "
                "VARIABLE} or {file: PATH} to read it from the environment or a file"});
    CHECK(Errors("db:\n  url: postgresql://app:hunter2@db/app\n") ==
          Lines{"c.yaml:2:8: error: db.url: the URL holds a password: move it to db.password as {env: VARIABLE} or "
                "{file: PATH} (or set SAGAFLOW_DB_URL in the environment)"});
    CHECK(Errors("kafka:\n  properties:\n    sasl.password: hunter2\n") ==
          Lines{"c.yaml:3:20: error: kafka.properties.sasl.password: a secret is not written into the configuration "
                "file: write {env: VARIABLE} or {file: PATH} to read it from the environment or a file"});
    CHECK(Errors("db:\n  password: {env: NOT_SET}\n") ==
          Lines{"c.yaml:2:19: error: db.password.env: the environment variable NOT_SET is not set or empty"});
    CHECK(Errors("db:\n  password: {env: A, file: b}\n") ==
          Lines{"c.yaml:2:13: error: db.password: write exactly one of {env: VARIABLE} or {file: PATH}"});
    CHECK(Errors("http:\n  tokens:\n    shop: {file: nowhere.token}\n") ==
          Lines{"c.yaml:3:18: error: http.tokens.shop.file: ./nowhere.token: cannot read the file: No such file or "
                "directory"});
    CHECK(Errors("http:\n  tokens:\n    a: {env: T}\n    b: {env: T}\n", {{"T", "same"}}) ==
          Lines{"c.yaml:4:8: error: http.tokens.b: the same token as client 'a': give each client its own"});

    TempDir dir;
    dir.Write("db.secret", "s3cret\n");
    const Config from_file = Load(
        "db:\n  url: host=db dbname=app\n  password: {file: db.secret}\nkafka:\n  "
        "properties:\n    sasl.password: {env: KAFKA_PASSWORD}\n",
        {{"KAFKA_PASSWORD", "k-secret"}},
        dir.path);
    CHECK(from_file.engine.database_url == "host=db dbname=app password='s3cret'");
    CHECK(LibpqPassword(from_file.engine.database_url) == "s3cret");
    CHECK(from_file.engine.kafka_properties.at("sasl.password") == "k-secret");
    // A URL from the command line replaces db.url, not the password; its own password wins.
    CHECK(LibpqPassword(from_file.WithDbPassword("postgresql://app@other/db")) == "s3cret");
    CHECK(from_file.WithDbPassword("postgresql://app:own@other/db") == "postgresql://app:own@other/db");
    CHECK(Load("").WithDbPassword("postgresql://app@other/db") == "postgresql://app@other/db");
    const std::string printed = from_file.Describe();
    CHECK(printed.find("s3cret") == std::string::npos);
    CHECK(printed.find("k-secret") == std::string::npos);
    CHECK(printed.find("sasl.password: \"***\"") != std::string::npos);
}

TEST_CASE("SAGAFLOW_<SECTION>_<KEY> overrides one key; a bad value names the variable; near misses are refused") {
    const std::string file = "db:\n  url: postgresql://file/db\nkafka:\n  brokers: file:9092\n";
    const Config c = Load(file,
                          {{"SAGAFLOW_DB_URL", "postgresql://app:from-env@env/db"},
                           {"SAGAFLOW_HTTP_LISTEN", "0.0.0.0:9000"},
                           {"SAGAFLOW_ENGINE_HISTORY_RETENTION_DAYS", "7"},
                           {"SAGAFLOW_PARTICIPANT_INBOX_TTL", "24h"},
                           {"SAGAFLOW_KAFKA_PROBE", "/usr/bin/probe"},   // another tool's variable: not ours
                           {"SAGAFLOW_DB_POOL_SIZE", ""}});              // empty: unset
    CHECK(c.engine.database_url == "postgresql://app:from-env@env/db");  // a password from the environment is fine
    CHECK(c.engine.kafka_brokers == "file:9092");
    CHECK(c.engine.http.enabled);
    CHECK(c.engine.http.port == 9000);
    CHECK(*c.engine.history_retention == std::chrono::hours(24 * 7));
    CHECK(c.participant.inbox_ttl == std::chrono::hours(24));
    CHECK(c.engine.database_pool_size == 4);
    CHECK(
        Load("", {{"SAGAFLOW_DB_PASSWORD", "from-env"}, {"SAGAFLOW_DB_URL", "postgresql://h/d"}}).engine.database_url ==
        "postgresql://h/d?password=from-env");

    CHECK(Errors(file, {{"SAGAFLOW_DB_POOL_SIZE", "lots"}, {"SAGAFLOW_HTTP_LISTN", "0.0.0.0:1"}}) ==
          Lines{"$SAGAFLOW_DB_POOL_SIZE: error: db.pool_size: expected an integer, found 'lots'",
                "$SAGAFLOW_HTTP_LISTN: error: not a configuration variable (did you mean 'SAGAFLOW_HTTP_LISTEN'?); "
                "the variables are SAGAFLOW_<SECTION>_<KEY>, listed by sagaflow config --keys"});
}

TEST_CASE("mappings and lists from the environment: entries set over the file's, a list replaced") {
    TempDir dir;
    dir.Write("a.yaml", "saga: a\n");
    dir.Write("b.yaml", "saga: b\n");
    const std::string file =
        "kafka:\n  properties:\n    client.id: from-file\n    socket.timeout.ms: 30000\nhttp:\n  tokens:\n    shop: "
        "{env: SHOP_TOKEN}\nengine:\n  sagas: [a.yaml]\n";
    const Config c =
        Load(file,
             {{"SAGAFLOW_KAFKA_PROPERTIES", "socket.timeout.ms=5000; sasl.password = k=secret;"},
              {"SAGAFLOW_KAFKA_CONSUMER_PROPERTIES", "fetch.wait.max.ms=10"},
              // shop's token comes from here, so the file's {env: SHOP_TOKEN} is not read
              {"SAGAFLOW_HTTP_TOKENS", "operator-alice=t-alice;shop=t-shop"},
              {"SAGAFLOW_ENGINE_SAGAS", (dir.path / "b.yaml").string() + "," + (dir.path / "a.yaml").string()}},
             dir.path);
    CHECK(c.engine.kafka_properties == std::map<std::string, std::string>{{"client.id", "from-file"},
                                                                          {"socket.timeout.ms", "5000"},
                                                                          {"sasl.password", "k=secret"}});
    CHECK(c.participant.kafka_properties == c.engine.kafka_properties);
    CHECK(c.engine.consumer_properties == std::map<std::string, std::string>{{"fetch.wait.max.ms", "10"}});
    CHECK(c.engine.http.tokens ==
          std::map<std::string, std::string>{{"t-alice", "operator-alice"}, {"t-shop", "shop"}});
    CHECK(c.sagas == std::vector<std::filesystem::path>{dir.path / "b.yaml", dir.path / "a.yaml"});
    const std::string printed = c.Describe();
    CHECK(printed.find("k=secret") == std::string::npos);
    CHECK(printed.find("t-alice") == std::string::npos);

    CHECK(Errors("", {{"SAGAFLOW_KAFKA_PROPERTIES", "socket.timeout.ms"}}) ==
          Lines{"$SAGAFLOW_KAFKA_PROPERTIES: error: kafka.properties: expected NAME=VALUE entries separated by ';', "
                "found 'socket.timeout.ms'"});
    CHECK(Errors("", {{"SAGAFLOW_KAFKA_PROPERTIES", "no.such.property=1"}}) ==
          Lines{"$SAGAFLOW_KAFKA_PROPERTIES: error: kafka.properties.no.such.property: librdkafka refuses it: No such "
                "configuration property: \"no.such.property\""});
    CHECK(Errors("", {{"SAGAFLOW_ENGINE_SAGAS", "/nowhere/x.yaml"}}) ==
          Lines{"$SAGAFLOW_ENGINE_SAGAS: error: engine.sagas[0]: no such file: /nowhere/x.yaml"});
    CHECK(Errors("", {{"SAGAFLOW_HTTP_TOKENS", "a=same;b=same"}}) ==
          Lines{"$SAGAFLOW_HTTP_TOKENS: error: http.tokens.b: the same token as client 'a': give each client its own"});
    CHECK(Errors("", {{"SAGAFLOW_HTTP_TOKEN", "a=t"}}) ==
          Lines{"$SAGAFLOW_HTTP_TOKEN: error: not a configuration variable (did you mean 'SAGAFLOW_HTTP_TOKENS'?); the "
                "variables are SAGAFLOW_<SECTION>_<KEY>, listed by sagaflow config --keys"});
}

TEST_CASE("a malformed file is refused with its position, as a definition would be") {
    CHECK(Errors("db:\n\turl: x\n") ==
          Lines{"c.yaml:2:5: error: YAML syntax: illegal map value (YAML does not allow tabs for indentation: use "
                "spaces)"});
    CHECK(Errors("db: [1, 2]\n") == Lines{"c.yaml:1:5: error: db: expected a mapping of keys, found a list"});
    CHECK(Errors("db: {}\n---\nkafka: {}\n") ==
          Lines{"c.yaml:2:1: error: more than one YAML document, or text after the first one ends: one "
                "configuration a file (sections db, kafka, engine, http, participant)"});
}

TEST_CASE("config/README.md lists every key as the key table does, and the example file shows each of them") {
    std::ifstream in(SourceDir() / "config/README.md");
    const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string table = sagaflow::ConfigKeysMarkdown();
    CHECK_MESSAGE(readme.find(table) != std::string::npos,
                  "config/README.md's key table differs from `sagaflow config --keys`: paste its output there");
    std::ifstream example_in(SourceDir() / "examples/config/sagaflow.yaml");
    const std::string example((std::istreambuf_iterator<char>(example_in)), std::istreambuf_iterator<char>());
    for (std::size_t at = table.find("| `"); at != std::string::npos; at = table.find("\n| `", at + 1)) {
        const auto start = table.find('`', at) + 1;
        const std::string path = table.substr(start, table.find('`', start) - start);
        const std::string key = path.substr(path.find('.') + 1);
        const bool shown = example.find("  " + key + ":") != std::string::npos ||
                           example.find("  # " + key + ":") != std::string::npos;  // documented, left unset
        CHECK_MESSAGE(shown, path, " is missing from examples/config/sagaflow.yaml");
    }
}
