// The `sagaflow` command line. Exit codes: 0 success, 1 the input is invalid, 2 usage error.
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <pqxx/pqxx>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "config/config.hpp"
#include "core/definition_graph.hpp"
#include "core/definition_loader.hpp"
#include "core/explore.hpp"
#include "core/text_scan.hpp"
#include "core/upgrade_check.hpp"
#include "core/version.hpp"
#include "engine/engine.hpp"
#include "engine/repository/retention.hpp"
#include "engine/repository/saga_store.hpp"
#include "outbox/dead_letters.hpp"
#include "outbox/event.hpp"
#include "outbox/kafka.hpp"
#include "outbox/relay.hpp"
#include "store/errors.hpp"
#include "store/inbox.hpp"
#include "store/migrations.hpp"
#include "store/pool.hpp"
#include "store/sweeper.hpp"
#include "store/url.hpp"
#include "tools/audit.hpp"
#include "tools/cli/demo.hpp"
#include "tools/conformance.hpp"

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

// `sagaflow explore FILE`: every failure path of the saga, checked (core/explore.hpp).
int Explore(const std::string& file, int depth, bool json) {
    const auto result = sagaflow::LoadDefinitionFile(file);
    for (const auto& d : result.diagnostics) std::cerr << d.ToString() << "\n";
    if (!result.definition) return kExitInvalid;
    sagaflow::explore::Options options;
    options.depth = depth;
    const auto report = sagaflow::explore::Explore(*result.definition, options);
    std::cout << (json ? report.Json().dump(2) + "\n" : report.Text());
    return report.Ok() ? 0 : kExitInvalid;
}

// `sagaflow upgrade-check OLD NEW [--db URL]`: what NEW changes for OLD's running instances
// (core/upgrade_check.hpp); with a database, how many there are at each step.
int UpgradeCheck(const std::string& old_file, const std::string& new_file, const std::string& db_url, bool json) {
    const auto old_result = sagaflow::LoadDefinitionFile(old_file);
    const auto new_result = sagaflow::LoadDefinitionFile(new_file);
    for (const auto* r : {&old_result, &new_result}) {
        for (const auto& d : r->diagnostics) std::cerr << d.ToString() << "\n";
    }
    if (!old_result.definition || !new_result.definition) return kExitInvalid;
    const auto& o = *old_result.definition;
    const auto& n = *new_result.definition;
    if (o.name != n.name) {
        std::cerr << "sagaflow: error: " << old_file << " defines saga '" << o.name << "' and " << new_file
                  << " defines '" << n.name << "'\nHint: compare two versions of one saga\n";
        return kExitUsage;
    }
    const auto report = sagaflow::upgrade::Compare(o, n);
    nlohmann::json out = report.Json();
    std::string in_flight_text;
    if (!db_url.empty()) {
        pqxx::connection conn{db_url};
        pqxx::read_transaction tx{conn};
        nlohmann::json rows = nlohmann::json::array();
        long long total = 0;
        for (const auto& row :
             tx.exec_params("SELECT current_step, status, count(*) FROM saga_instance WHERE saga_type = $1 AND "
                            "definition_hash = $2 "
                            "AND status IN ('running', 'compensating', 'failed') GROUP BY 1, 2 ORDER BY 1, 2",
                            o.name,
                            o.hash)) {
            const auto step = row[0].as<std::size_t>();
            const std::string status = row[1].as<std::string>();
            const auto count = row[2].as<long long>();
            total += count;
            const std::string name = step < o.steps.size() ? o.steps[step].name : "?";
            const auto handlers = sagaflow::upgrade::HandlersNeeded(o, step, status == "compensating");
            rows.push_back({{"step", name}, {"status", status}, {"sagas", count}, {"handlers", handlers}});
            std::string list;
            for (const auto& h : handlers) list += (list.empty() ? "" : ", ") + h;
            in_flight_text += fmt::format("  {} {} at '{}'; may still need {}\n", count, status, name, list);
        }
        out["inFlight"] = {{"sagas", total}, {"byStep", rows}};
        in_flight_text =
            fmt::format("instances of v{} (hash {}) not finished: {}\n", o.version, o.hash.substr(0, 12), total) +
            in_flight_text;
    }
    if (json) {
        std::cout << out.dump(2) << "\n";
    } else {
        std::cout << report.Text() << in_flight_text;
    }
    return report.Worst() == sagaflow::upgrade::Verdict::kUnsafe ? kExitInvalid : 0;
}

int Graph(const std::string& file, const std::string& format) {
    const auto result = sagaflow::LoadDefinitionFile(file);
    for (const auto& d : result.diagnostics) {
        std::cerr << d.ToString() << "\n";
    }
    if (!result.definition) {
        return kExitInvalid;
    }
    std::cout << sagaflow::RenderGraph(*result.definition, *sagaflow::ParseGraphFormat(format));
    return 0;
}

// Thrown after a configuration's diagnostics were printed: exit 1 with nothing more to say.
struct ConfigRefused {};

// The configuration file (or, without one, the defaults) with the SAGAFLOW_* variables applied;
// its diagnostics are printed, one a line, and ConfigRefused thrown.
sagaflow::Config LoadConfig(const std::string& file) {
    auto result = sagaflow::LoadConfigOrDefaults(file);
    for (const auto& d : result.diagnostics) std::cerr << d.ToString() << "\n";
    if (!result.config) {
        std::cerr << result.diagnostics.size() << " configuration error(s)\n";
        throw ConfigRefused{};
    }
    return std::move(*result.config);
}

// --db, else db.url of --config / SAGAFLOW_DB_URL; the URL is never printed unredacted.
std::string DbUrl(const std::string& flag, const std::string& config_file) {
    const auto config = LoadConfig(config_file);
    if (!flag.empty()) return config.WithDbPassword(flag);
    auto url = config.engine.database_url;
    if (!url.empty()) return url;
    throw CLI::ValidationError("--db", "no database: pass --db URL, --config FILE with db.url, or set SAGAFLOW_DB_URL");
}

// --brokers, else kafka.brokers of --config / SAGAFLOW_KAFKA_BROKERS.
std::string Brokers(const std::string& flag, const sagaflow::Config& config) {
    if (!flag.empty()) return flag;
    if (!config.engine.kafka_brokers.empty()) return config.engine.kafka_brokers;
    throw CLI::ValidationError(
        "--brokers",
        "no Kafka brokers: pass --brokers, --config FILE with kafka.brokers, or set SAGAFLOW_KAFKA_BROKERS");
}

int Migrate(const std::string& url, const std::string& dir) {
    const auto migrations =
        dir.empty() ? sagaflow::store::BuiltinMigrations() : sagaflow::store::MigrationsFromDir(dir);
    const auto report = sagaflow::store::MigrateBlocking(url, migrations);
    for (const auto& name : report.already_applied) std::cout << "already applied  " << name << "\n";
    for (const auto& name : report.applied) std::cout << "applied          " << name << "\n";
    std::cout << report.applied.size() << " migration(s) applied, " << report.already_applied.size()
              << " already present\n";
    return 0;
}

int Sweep(const std::string& url, int ttl_hours) {
    try {
        sagaflow::store::ValidateTtl(std::chrono::hours(ttl_hours));
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("--ttl-hours: ") + e.what());
    }
    auto conn = sagaflow::store::ConnectOnce(url);
    const auto report = sagaflow::store::SweepOnce(*conn, std::chrono::hours(ttl_hours));
    std::cout << sagaflow::store::Describe(report, std::chrono::hours(ttl_hours)) << "\n";
    return 0;
}

// `days` as a prune horizon, validated before anything connects; an error names `flag`.
std::chrono::hours PruneHorizon(int days, const std::string& flag) {
    sagaflow::PruneOptions options;
    options.older_than = std::chrono::hours(24LL * std::max(days, 0));
    try {
        sagaflow::ValidatePruneOptions(options);
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(flag + ": " + e.what());
    }
    return options.older_than;
}

int Prune(const std::string& url, int days, sagaflow::PruneOptions options) {
    options.older_than = PruneHorizon(days, "--older-than-days");
    auto conn = sagaflow::store::ConnectOnce(url);
    // Progress on stderr, the result on stdout: a first pass over a large history takes a while.
    const auto report = sagaflow::PruneHistory(*conn, options, [](const sagaflow::PruneReport& so_far) {
        std::cerr << "prune: " << so_far.sagas << " sagas deleted so far\n";
    });
    std::cout << sagaflow::Describe(report, options) << "\n";
    return 0;
}

// One saga as an operator reads it: its state, step phases and timeline (text or JSON), or drawn
// over its definition with each phase coloured by its status (mermaid, dot).
int Show(const std::string& url, const std::string& saga_id, const std::string& format) {
    if (!sagaflow::store::IsUuid(saga_id)) {
        throw std::invalid_argument("'" + saga_id + "' is not a saga id (a UUID, as POST /v1/sagas answers)");
    }
    auto conn = sagaflow::store::ConnectOnce(url);
    pqxx::read_transaction tx{*conn};
    const auto saga = sagaflow::detail::ReadSagaView(tx, saga_id);
    if (!saga) {
        std::cerr << "sagaflow: error: no saga " << saga_id << " in this database\n";
        return kExitInvalid;
    }
    if (format == "json") {
        std::cout << sagaflow::detail::SagaJson(*saga).dump(2) << "\n";
        return 0;
    }
    if (const auto graph_format = sagaflow::ParseGraphFormat(format)) {
        const auto definition = sagaflow::detail::ReadStoredDefinition(tx, saga->saga_type, saga->definition_hash);
        const auto overlay = sagaflow::detail::OverlayOf(*saga);
        std::cout << sagaflow::RenderGraph(definition, *graph_format, &overlay);
        return 0;
    }
    const auto& s = *saga;
    std::cout << fmt::format(
        "saga {} · {} v{} · {}\n", s.saga_id, s.saga_type, s.definition_version, sagaflow::machine::ToString(s.status));
    if (!s.parked_reason.empty()) std::cout << "  parked: " << s.parked_reason << "\n";
    std::cout << fmt::format(
        "  created {} · updated {}{}\n",
        s.created_at,
        s.updated_at,
        s.deadline_at.empty() ? "" : " · cancelled at " + s.deadline_at + " unless past its pivot");
    if (!s.idempotency_key.empty()) std::cout << "  idempotency key: " << s.idempotency_key << "\n";
    if (!s.trace.traceparent.empty()) std::cout << "  traceparent: " << s.trace.traceparent << "\n";
    std::cout << "  input: " << s.input.dump() << "\n  data:  " << s.data.dump() << "\n\n";
    std::cout << fmt::format("  {:<20} {:<13} {:<11} {:>7}  {:<24} {}\n",
                             "step",
                             "phase",
                             "status",
                             "attempt",
                             "dispatched",
                             "answered / next attempt / deadline");
    for (const auto& p : s.steps) {
        const std::string when = !p.completed_at.empty()      ? p.completed_at
                                 : !p.next_attempt_at.empty() ? "next attempt " + p.next_attempt_at
                                 : !p.deadline_at.empty()     ? "deadline " + p.deadline_at
                                                              : "";
        std::cout << fmt::format("  {:<20} {:<13} {:<11} {:>7}  {:<24} {}\n",
                                 p.step_name,
                                 sagaflow::machine::ToString(p.phase),
                                 sagaflow::machine::ToString(p.status),
                                 p.attempt,
                                 p.dispatched_at,
                                 when);
    }
    std::cout << "\n  timeline:\n";
    for (const auto& e : s.timeline) {
        const std::string detail = e.detail.is_object() && !e.detail.empty() ? e.detail.dump() : "";
        std::cout << fmt::format("  {}  {:<16} {:<20} {:<13} {:>2}  {}\n",
                                 e.at,
                                 e.kind,
                                 e.step_name,
                                 e.phase ? sagaflow::machine::ToString(*e.phase) : "",
                                 e.attempt == 0 ? "" : std::to_string(e.attempt),
                                 detail);
    }
    return 0;
}

struct DlqFlags {
    std::string topic;
    std::string brokers;
    std::string match;  // only letters whose reason contains it
    bool replay = false;
    bool json = false;
};

// Lists the dead letters of a .dlq topic (what, from where, why) and, with --replay, sends the
// listed ones back to their origin topics.
struct ConformanceFlags {
    sagaflow::ConformanceOptions options;
    std::string brokers;
    int timeout_seconds = 30;
};

CLI::App* AddConformance(CLI::App& app, ConformanceFlags& flags, std::string& config_file) {
    auto& o = flags.options;
    auto* sub = app.add_subcommand(
        "conformance",
        "Play the engine against a running participant (any language) and check it keeps the protocol "
        "(docs/protocol.md); exit 1 if a check fails");
    sub->add_option("--participant", o.participant, "its name: it reads NAME.commands")->required();
    sub->add_option("--action", o.action_type, "an action's command type, e.g. ChargePayment.v1")->required();
    sub->add_option("--compensation", o.compensation_type, "that action's compensation type")->required();
    sub->add_option("--brokers", flags.brokers, "Kafka bootstrap servers (default: kafka.brokers of --config)");
    sub->add_option("--config", config_file, "a sagaflow configuration file (brokers, kafka.properties)")
        ->check(CLI::ExistingFile);
    sub->add_option("--replies-topic", o.replies_topic)->capture_default_str();
    sub->add_option("--data",
                    o.action_data,
                    "JSON data of an action it applies with success; {saga} becomes each "
                    "check's saga id")
        ->capture_default_str();
    sub->add_option("--compensation-data", o.compensation_data, "JSON data of the compensation")->capture_default_str();
    sub->add_option("--retry-data",
                    o.retry_data,
                    "JSON data of an action it answers `retry` first and `success` when sent again (without it, that "
                    "check is skipped)");
    sub->add_option("--timeout-seconds", flags.timeout_seconds, "how long each check waits for an answer")
        ->check(CLI::Range(1, 600))
        ->capture_default_str();
    return sub;
}

// Prints each check as it ends and the tally; 0 only when none failed.
int Conformance(ConformanceFlags flags, const std::string& config_file) {
    using Result = sagaflow::ConformanceCheck::Result;
    const auto config = LoadConfig(config_file);
    auto& options = flags.options;
    options.brokers = Brokers(flags.brokers, config);
    options.kafka_properties = config.engine.kafka_properties;
    options.timeout = std::chrono::seconds(flags.timeout_seconds);
    std::cout << "conformance of participant " << options.participant << " (" << options.participant << ".commands -> "
              << options.replies_topic << ")\n";
    const auto report = sagaflow::RunConformance(options, [](const sagaflow::ConformanceCheck& check) {
        const char* mark = check.result == Result::kPassed ? "ok  " : check.result == Result::kFailed ? "FAIL" : "skip";
        std::cout << fmt::format("  {} {:<22} {}\n", mark, check.name, check.detail) << std::flush;
    });
    std::cout << fmt::format("{} passed, {} failed, {} skipped\n",
                             report.Count(Result::kPassed),
                             report.Count(Result::kFailed),
                             report.Count(Result::kSkipped));
    return report.Count(Result::kFailed) == 0 ? 0 : 1;
}

int DeadLetters(const DlqFlags& flags, const std::string& config_file) {
    const auto config = LoadConfig(config_file);
    const std::string brokers = Brokers(flags.brokers, config);
    if (flags.topic.size() < 5 || flags.topic.substr(flags.topic.size() - 4) != ".dlq") {
        throw CLI::ValidationError("TOPIC", "'" + flags.topic + "' is not a dead-letter topic: name <topic>.dlq");
    }
    auto letters = sagaflow::outbox::ReadDeadLetters(
        brokers, flags.topic, config.engine.kafka_properties, std::chrono::seconds(30));
    const std::size_t total = letters.size();
    std::erase_if(letters, [&](const auto& l) { return l.reason.find(flags.match) == std::string::npos; });
    nlohmann::json listed = nlohmann::json::array();
    for (const auto& l : letters) {
        std::string why;
        const auto event = sagaflow::outbox::ParseCloudEvent(l.value, why);
        if (flags.json) {
            listed.push_back({{"partition", l.partition},
                              {"offset", l.offset},
                              {"origin", l.origin},
                              {"reason", l.reason},
                              {"key", l.key},
                              {"eventId", event ? event->id : ""},
                              {"eventType", event ? event->type : ""},
                              {"value", l.value},
                              {"valueOmittedBytes", l.omitted_size ? *l.omitted_size : 0}});
            continue;
        }
        std::cout << l.partition << "@" << l.offset << "  from " << l.origin << "  key " << l.key << "\n"
                  << "    reason: " << l.reason << "\n";
        if (l.omitted_size) {
            std::cout << "    value omitted (" << *l.omitted_size << " bytes): it is still at " << l.origin << "\n";
        } else if (event) {
            std::cout << "    event " << event->id << " " << event->type << "\n";
        } else {
            std::cout << "    value (" << l.value.size() << " bytes): " << l.value.substr(0, 80)
                      << (l.value.size() > 80 ? "..." : "") << "\n";
        }
    }
    if (flags.json) std::cout << listed.dump(2) << "\n";
    std::cerr << total << " dead letter(s) in " << flags.topic;
    if (!flags.match.empty()) std::cerr << ", " << letters.size() << " with '" << flags.match << "' in the reason";
    std::cerr << "\n";
    if (flags.replay) {
        const auto report = sagaflow::outbox::ReplayDeadLetters(brokers, letters, config.engine.kafka_properties);
        std::cerr << "replayed " << report.replayed << " to their origin topics"
                  << (report.skipped != 0 ? " (" + std::to_string(report.skipped) +
                                                " without a value skipped: replay them from their origin)"
                                          : "")
                  << "; the inboxes drop any already applied\n";
    }
    return 0;
}

std::atomic<bool> g_stop{false};

// Runs the outbox relay until SIGINT/SIGTERM; prints a progress line every 5 s.
int RunRelay(const std::string& url, std::string brokers, const std::string& config_file) {
    const auto config = LoadConfig(config_file);
    brokers = Brokers(brokers, config);
    sagaflow::store::MigrateBlocking(url, sagaflow::store::BuiltinMigrations());
    sagaflow::outbox::RelayOptions options;
    options.db_url = url;
    options.brokers = brokers;
    options.properties = config.engine.kafka_properties;
    sagaflow::outbox::Relay relay{options};
    std::signal(SIGINT, [](int) { g_stop = true; });
    std::signal(SIGTERM, [](int) { g_stop = true; });
    relay.Start();
    std::cerr << "relay: running against " << sagaflow::store::RedactUrl(url) << " -> " << brokers << "\n";
    for (int tick = 0; !g_stop.load(); ++tick) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (tick % 50 == 49) {
            const auto& m = relay.Metrics();
            std::cerr << "relay: published " << m.published << ", retried " << m.retried << ", leader "
                      << (relay.IsLeader() ? "yes" : "no") << "\n";
        }
    }
    relay.Stop();
    return 0;
}

struct RunFlags {
    std::string config;  // a configuration file; the flags below override its keys when given
    std::string brokers;
    std::vector<std::string> sagas;
    std::string group = "sagaflow-engine";
    std::string replies_topic = "sagaflow.replies";
    std::string instance;
    bool no_relay = false;
    bool static_membership = false;
    bool no_static_membership = false;
    bool no_create_topics = false;
    std::vector<std::string> kafka_properties;
    std::vector<std::string> consumer_properties;
    std::string http;                      // ADDRESS:PORT
    std::vector<std::string> http_tokens;  // TOKEN=CLIENT
    bool http_allow_unauthenticated = false;
    int idempotency_ttl_hours = 48;
    int prune_after_days = 0;  // 0: finished sagas are kept (sagaflow prune deletes them on demand)
};

// Runs the engine until SIGINT/SIGTERM; prints a progress line every 5 s. `given` tells which
// flags were on the command line: those override the configuration file.
int RunEngine(const std::string& db_flag, const RunFlags& flags, const std::function<bool(const char*)>& given) {
    auto loaded = LoadConfig(flags.config);
    auto& config = loaded.engine;
    if (!db_flag.empty()) config.database_url = loaded.WithDbPassword(db_flag);
    if (given("--brokers")) config.kafka_brokers = flags.brokers;
    if (given("--group")) config.consumer_group = flags.group;
    if (given("--replies-topic")) config.replies_topic = flags.replies_topic;
    if (given("--instance")) config.instance_id = flags.instance;
    if (flags.no_relay) config.run_relay = false;
    if (flags.static_membership) config.static_membership = true;
    if (flags.no_static_membership) config.static_membership = false;
    if (flags.no_create_topics) config.create_topics = false;
    for (const auto& [key, value] : sagaflow::outbox::ParseKafkaProperties(flags.kafka_properties)) {
        config.kafka_properties[key] = value;
    }
    for (const auto& [key, value] : sagaflow::outbox::ParseKafkaProperties(flags.consumer_properties)) {
        config.consumer_properties[key] = value;
    }
    if (given("--prune-after-days")) {
        config.history_retention.reset();
        if (flags.prune_after_days != 0) {
            config.history_retention = PruneHorizon(flags.prune_after_days, "--prune-after-days");
        }
    }
    if (!flags.http.empty() && !sagaflow::ParseListen(flags.http, config.http)) {
        throw CLI::ValidationError(
            "--http",
            "expected ADDRESS:PORT (e.g. 0.0.0.0:8080, [::1]:8080; port 0: any free port), found " +
                sagaflow::text::Quote(flags.http));
    }
    if (given("--idempotency-ttl-hours")) config.http.idempotency_ttl = std::chrono::hours(flags.idempotency_ttl_hours);
    if (flags.http_allow_unauthenticated) config.http.allow_unauthenticated = true;
    for (const auto& pair : flags.http_tokens) {
        const auto eq = pair.find('=');
        if (eq == std::string::npos || eq == 0) throw CLI::ValidationError("--http-token", "expected TOKEN=CLIENT");
        config.http.tokens[pair.substr(0, eq)] = pair.substr(eq + 1);
    }
    auto sagas = loaded.sagas;
    sagas.insert(sagas.end(), flags.sagas.begin(), flags.sagas.end());
    sagaflow::Engine engine{config};
    for (const auto& file : sagas) {
        try {
            engine.RegisterDefinitionFile(file);
        } catch (const sagaflow::DefinitionError& e) {
            for (const auto& d : e.Diagnostics()) std::cerr << d.ToString() << "\n";
            return kExitInvalid;
        }
    }
    std::signal(SIGINT, [](int) { g_stop = true; });
    std::signal(SIGTERM, [](int) { g_stop = true; });
    engine.Start();
    if (engine.HttpPort() != 0) std::cerr << "engine: HTTP API on port " << engine.HttpPort() << std::endl;
    std::cerr << "engine " << engine.Config().instance_id << ": running against "
              << sagaflow::store::RedactUrl(config.database_url) << " and " << config.kafka_brokers << " ("
              << sagas.size() << " saga definition(s))" << std::endl;
    for (int tick = 0; !g_stop.load(); ++tick) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (tick % 50 == 49) {
            const auto m = engine.Metrics();
            std::cerr << "engine: started " << m.sagas_started << ", replies " << m.replies_applied << " (+"
                      << m.replies_ignored << " ignored, " << m.reply_duplicates << " duplicates), timers "
                      << m.timers_fired << ", finished " << m.sagas_finished << " (" << m.sagas_parked
                      << " parked), published " << m.outbox_published
                      << (m.consumer_restarts != 0 ? ", consumer restarts " + std::to_string(m.consumer_restarts) : "")
                      << std::endl;
        }
    }
    engine.Stop();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // Logs go to stderr, as a daemon's should: stdout stays for what a command prints (graphs,
    // audit reports), and a supervisor that captures stderr gets the relay's and consumers' story.
    spdlog::set_default_logger(spdlog::stderr_color_mt("sagaflow"));
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
    graph->add_option("--format", graph_format, "mermaid, dot or svg")
        ->check(CLI::IsMember({"mermaid", "dot", "svg"}))
        ->capture_default_str();

    std::string explore_file;
    int explore_depth = 0;
    bool explore_json = false;
    auto* explore = app.add_subcommand(
        "explore", "Drive the saga's state machine through every sequence of faults up to a depth and check it");
    explore->add_option("FILE", explore_file, "YAML saga definition")->required()->check(CLI::ExistingFile);
    explore->add_option("--depth", explore_depth, "the most events on a path (0: every step phase with two faults)")
        ->check(CLI::Range(0, 1000))
        ->capture_default_str();
    explore->add_flag("--json", explore_json, "the report as JSON (sagas/explore.schema.json)");

    std::string upgrade_old, upgrade_new, upgrade_db;
    bool upgrade_json = false;
    auto* upgrade = app.add_subcommand(
        "upgrade-check", "What deploying NEW changes for OLD's running instances: safe, needs-both-handlers, unsafe");
    upgrade->add_option("OLD", upgrade_old, "the running version's YAML")->required()->check(CLI::ExistingFile);
    upgrade->add_option("NEW", upgrade_new, "the version to deploy")->required()->check(CLI::ExistingFile);
    upgrade->add_option("--db", upgrade_db, "count OLD's unfinished instances by step in this database");
    upgrade->add_flag("--json", upgrade_json, "the report as JSON (sagas/upgrade-check.schema.json)");

    std::string db_flag;
    std::string config_file;
    // --db and --config, for every subcommand that works on a database.
    const auto add_db = [&](CLI::App* sub) {
        sub->add_option("--db", db_flag, "PostgreSQL URL (default: db.url of --config, or $SAGAFLOW_DB_URL)");
        sub->add_option("--config", config_file, "a sagaflow configuration file (config/README.md)")
            ->check(CLI::ExistingFile);
    };

    std::string check_file;
    auto* check_config = app.add_subcommand(
        "config", "Check a configuration file with the SAGAFLOW_* variables applied; print the result, secrets as ***");
    check_config->add_option("FILE", check_file, "YAML configuration file")->check(CLI::ExistingFile);
    bool config_keys = false;
    check_config->add_flag(
        "--keys", config_keys, "print every key as a Markdown table: variable, type and range, default");

    std::string migrations_dir;
    auto* migrate = app.add_subcommand("migrate", "Apply the schema migrations (idempotent; safe to run concurrently)");
    add_db(migrate);
    migrate
        ->add_option("--dir", migrations_dir, "apply NNN_name.sql files from this folder instead of the built-in ones")
        ->check(CLI::ExistingDirectory);

    int ttl_hours = 48;
    auto* sweep = app.add_subcommand(
        "sweep", "Delete inbox and idempotency records and published outbox rows past their TTL, now");
    add_db(sweep);
    sweep->add_option("--ttl-hours", ttl_hours, "records older than this are deleted; 24 to 72")->capture_default_str();

    int prune_days = 30;
    sagaflow::PruneOptions prune_options;
    auto* prune = app.add_subcommand(
        "prune", "Delete finished sagas (row, steps, timeline) that ended over --older-than-days ago; for cron");
    add_db(prune);
    prune->add_option("--older-than-days", prune_days, "sagas that ended longer ago are deleted; at least 3")
        ->capture_default_str();
    prune->add_flag("--include-failed", prune_options.include_failed, "also failed sagas (parked for an operator)");
    prune->add_flag("--dry-run", prune_options.dry_run, "count what would be deleted, delete nothing");

    std::string brokers;
    auto* relay = app.add_subcommand("relay", "Publish outbox rows to Kafka until interrupted");
    add_db(relay);
    relay->add_option("--brokers", brokers, "Kafka bootstrap servers (default: kafka.brokers of --config)");

    RunFlags run_flags;
    auto* run = app.add_subcommand("run", "Run the saga engine (relay, reply consumer, timers) until interrupted");
    run->add_option("--db", db_flag, "PostgreSQL URL (default: db.url of --config, or $SAGAFLOW_DB_URL)");
    run->add_option("--config", run_flags.config, "a sagaflow configuration file; the flags below override its keys")
        ->check(CLI::ExistingFile);
    run->add_option("--brokers", run_flags.brokers, "Kafka bootstrap servers (default: kafka.brokers of --config)");
    run->add_option("--saga", run_flags.sagas, "YAML saga definition to register (repeatable)")
        ->check(CLI::ExistingFile);
    run->add_option("--group", run_flags.group, "Kafka consumer group of the engines (and their inbox name)")
        ->capture_default_str();
    run->add_option("--replies-topic", run_flags.replies_topic, "topic the participants reply on")
        ->capture_default_str();
    run->add_option("--instance", run_flags.instance, "this engine's name in events (default: hostname-pid)");
    run->add_flag("--no-relay", run_flags.no_relay, "do not publish the outbox here (another process does)");
    run->add_option("--http", run_flags.http, "serve the HTTP API on ADDRESS:PORT (port 0: any free port)");
    run->add_flag("--http-allow-unauthenticated",
                  run_flags.http_allow_unauthenticated,
                  "serve a non-loopback --http address without tokens (operator endpoints still need one)");
    run->add_option("--http-token",
                    run_flags.http_tokens,
                    "TOKEN=CLIENT: require bearer tokens (repeatable); clients named operator* may list and retry");
    run->add_option("--idempotency-ttl-hours",
                    run_flags.idempotency_ttl_hours,
                    "how long idempotency records, the reply inbox and published outbox rows are kept; 24 to 72")
        ->capture_default_str();
    run->add_option("--prune-after-days",
                    run_flags.prune_after_days,
                    "delete finished sagas (steps, timeline) that ended over N days ago, daily; 0 keeps them; N >= 3")
        ->capture_default_str();
    run->add_flag("--no-create-topics", run_flags.no_create_topics, "the topics exist already (no admin rights, mock)");
    run->add_flag("--static-membership",
                  run_flags.static_membership,
                  "join the consumer group as a static member (the default; as --instance when given, else "
                  "<hostname>-<slot>), so a restart gets its partitions back at once");
    run->add_flag("--no-static-membership",
                  run_flags.no_static_membership,
                  "join the consumer group as a dynamic member (a restart rebalances the group)");
    run->add_option(
        "--kafka-property", run_flags.kafka_properties, "librdkafka KEY=VALUE for every client (repeatable)");
    run->add_option("--consumer-property",
                    run_flags.consumer_properties,
                    "librdkafka KEY=VALUE for the reply consumer (repeatable)");

    DlqFlags dlq_flags;
    auto* dlq = app.add_subcommand(
        "dlq", "List a .dlq topic's dead letters (origin, reason, event); --replay sends them back to their topics");
    dlq->add_option("TOPIC", dlq_flags.topic, "the dead-letter topic, <topic>.dlq")->required();
    dlq->add_option("--brokers", dlq_flags.brokers, "Kafka bootstrap servers (default: kafka.brokers of --config)");
    dlq->add_option("--config", config_file, "a sagaflow configuration file (brokers, kafka.properties)")
        ->check(CLI::ExistingFile);
    dlq->add_option("--match", dlq_flags.match, "only the dead letters whose reason contains this text");
    dlq->add_flag("--replay", dlq_flags.replay, "produce the listed dead letters to their origin topics again");
    dlq->add_flag("--json", dlq_flags.json, "print them as JSON (values included)");

    ConformanceFlags conformance_flags;
    auto* conformance = AddConformance(app, conformance_flags, config_file);

    std::string show_id;
    std::string show_format = "text";
    auto* show = app.add_subcommand(
        "show", "Show one saga: state, step phases and timeline, or a diagram coloured by what it did");
    add_db(show);
    show->add_option("SAGA_ID", show_id, "the saga's id")->required();
    show->add_option("--format", show_format, "text, json, mermaid, dot (dot -Tpng -o saga.png draws it) or svg")
        ->check(CLI::IsMember({"text", "json", "mermaid", "dot", "svg"}))
        ->capture_default_str();

    sagaflow::AuditOptions audit_options;
    bool audit_json = false;
    int grace_seconds = 60;
    auto* audit = app.add_subcommand("audit", "Check every saga guarantee in the database; exit 0 only if all hold");
    add_db(audit);
    audit->add_option("--participant-schema",
                      audit_options.participant_schemas,
                      "a participant's schema in the same database (repeatable)");
    audit->add_option("--payments-schema", audit_options.payments_schema, "the example payment tables' schema");
    audit->add_option("--grace-seconds", grace_seconds, "how late a timer or an unpublished row may be")
        ->capture_default_str();
    audit->add_flag("--json", audit_json, "print the report as JSON");

    sagaflow::cli::DemoOptions demo_options;
    {
        // Next to this binary in a build tree: <build>/tools/cli/sagaflow -> <build>/examples/order-payment.
        std::error_code ec;
        const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
        if (!ec) {
            demo_options.services_dir = (self.parent_path() / "../../examples/order-payment").lexically_normal();
            demo_options.node_service =
                (self.parent_path() / "../../examples/payment-ts/dist/main.js").lexically_normal();
        }
    }
    demo_options.saga_file = "sagas/order-payment.yaml";
    auto* demo =
        app.add_subcommand("demo", "Run the sample order-payment saga end to end and check the money invariant");
    demo->add_option(
        "--db", db_flag, "PostgreSQL URL (default: $SAGAFLOW_DB_URL); ./scripts/demo starts a private one");
    demo->add_option("--kafka", demo_options.kafka, "Kafka bootstrap servers (default: an embedded Kafka)");
    demo->add_option("--services-dir", demo_options.services_dir, "where the example services are")
        ->capture_default_str();
    demo->add_option("--saga", demo_options.saga_file, "the order-payment definition")
        ->check(CLI::ExistingFile)
        ->capture_default_str();
    demo->add_option("--payment-service",
                     demo_options.payment_service,
                     "cpp: the C++ payment service; node: the TypeScript one (examples/payment-ts)")
        ->check(CLI::IsMember({"cpp", "node"}))
        ->capture_default_str();
    demo->add_option("--node-service", demo_options.node_service, "the TypeScript payment service's main.js")
        ->capture_default_str();
    demo->add_option("--http-port", demo_options.http_port, "the console's port on 127.0.0.1 (0: any free port)")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str();
    demo->add_flag("--keep-running",
                   demo_options.keep_running,
                   "after the run keep the engine and services up, to click through the sagas in the console; Ctrl-C "
                   "ends it");
    demo->add_option("--sagas", demo_options.sagas, "how many sagas")
        ->check(CLI::Range(5, 100000))
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
    if (*explore) return Explore(explore_file, explore_depth, explore_json);
    try {
        if (*upgrade) return UpgradeCheck(upgrade_old, upgrade_new, upgrade_db, upgrade_json);
        if (*check_config) {
            std::cout << (config_keys ? sagaflow::ConfigKeysMarkdown() : LoadConfig(check_file).Describe());
            return 0;
        }
        if (*migrate) return Migrate(DbUrl(db_flag, config_file), migrations_dir);
        if (*sweep) return Sweep(DbUrl(db_flag, config_file), ttl_hours);
        if (*prune) return Prune(DbUrl(db_flag, config_file), prune_days, prune_options);
        if (*relay) return RunRelay(DbUrl(db_flag, config_file), brokers, config_file);
        if (*dlq) return DeadLetters(dlq_flags, config_file);
        if (*conformance) return Conformance(conformance_flags, config_file);
        if (*show) return Show(DbUrl(db_flag, config_file), show_id, show_format);
        if (*run) return RunEngine(db_flag, run_flags, [run](const char* flag) { return run->count(flag) > 0; });
        if (*audit) {
            audit_options.db_url = DbUrl(db_flag, config_file);
            audit_options.grace = std::chrono::seconds(grace_seconds);
            const auto report = sagaflow::AuditBlocking(audit_options);
            std::cout << (audit_json ? report.ToJson().dump(2) + "\n" : report.Summary());
            return report.Ok() ? 0 : kExitInvalid;
        }
        if (*demo) {
            demo_options.db_url = DbUrl(db_flag, "");  // SAGAFLOW_DB_PASSWORD applies to --db too
            return sagaflow::cli::RunDemo(demo_options);
        }
    } catch (const ConfigRefused&) {
        return kExitInvalid;
    } catch (const CLI::ParseError& e) {
        return app.exit(e), kExitUsage;
    } catch (const pqxx::undefined_table& e) {
        // sweep and audit read sagaflow's tables but never create them (run, relay and demo do).
        std::cerr << "sagaflow: error: " << sagaflow::store::ServerMessage(e.what())
                  << "\nHint: this database has no sagaflow schema yet (or --db names another database): run "
                     "`sagaflow migrate --db URL` first"
                  << (*audit ? "; for a participant's tables check --participant-schema and --payments-schema" : "")
                  << "\n";
        return kExitInvalid;
    } catch (const std::exception& e) {
        std::cerr << "sagaflow: error: " << e.what() << "\n";
        return kExitInvalid;
    }
    return kExitUsage;
}
