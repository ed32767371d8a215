#pragma once
// What the two example services share: their command line, and running a Participant until
// SIGINT/SIGTERM with a progress line every few seconds.

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "config/config.hpp"
#include "outbox/kafka.hpp"
#include "participant/participant.hpp"

namespace example {

struct ServiceFlags {
    std::string config;  // a sagaflow configuration file; the flags below override its keys when given
    std::string name;    // the participant name (the saga's `participant:`)
    std::string db;
    std::string schema;
    std::string brokers;
    std::string replies_topic = "sagaflow.replies";
    bool no_create_topics = false;
    std::vector<std::string> consumer_properties;  // KEY=VALUE
    int inbox_ttl_hours = 48;
};

// The engine's logs (relay, consumer, retries) go to stderr with the progress lines, where a
// supervisor collects them; stdout stays quiet.
inline void LogToStderr() {
    spdlog::set_default_logger(spdlog::stderr_color_mt("sagaflow"));
}

inline void AddServiceFlags(CLI::App& app,
                            ServiceFlags& flags,
                            const std::string& default_name,
                            const std::string& default_schema) {
    flags.name = default_name;
    flags.schema = default_schema;
    app.add_option("--name", flags.name, "participant name: commands come on <name>.commands")->capture_default_str();
    app.add_option("--config", flags.config, "a sagaflow configuration file (db, kafka and participant sections)")
        ->check(CLI::ExistingFile);
    app.add_option("--db", flags.db, "PostgreSQL URL (default: db.url of --config, or $SAGAFLOW_DB_URL)");
    app.add_option("--schema", flags.schema, "the service's own schema")->capture_default_str();
    app.add_option("--brokers", flags.brokers, "Kafka bootstrap servers (default: kafka.brokers of --config)");
    app.add_option("--replies-topic", flags.replies_topic, "where replies go")->capture_default_str();
    app.add_flag("--no-create-topics", flags.no_create_topics, "the topics exist already (embedded Kafka)");
    app.add_option("--consumer-property", flags.consumer_properties, "librdkafka KEY=VALUE for the command consumer");
    app.add_option("--inbox-ttl-hours",
                   flags.inbox_ttl_hours,
                   "how long a command's event id is remembered (redeliveries dropped); swept daily")
        ->check(CLI::Range(24, 72))
        ->capture_default_str();
}

// The configuration file (or the defaults) with the SAGAFLOW_* variables applied, then the flags
// given on the command line. A refused configuration is printed and ends the process (exit 1).
inline sagaflow::ParticipantConfig ConfigFrom(const CLI::App& app, const ServiceFlags& flags) {
    const auto loaded = sagaflow::LoadConfigOrDefaults(flags.config);
    for (const auto& d : loaded.diagnostics) std::cerr << d.ToString() << "\n";
    if (!loaded.config) std::exit(1);
    auto config = loaded.config->participant;
    const auto given = [&app](const char* flag) { return app.count(flag) > 0; };
    if (given("--name") || config.name.empty()) config.name = flags.name;
    if (given("--schema") || config.schema.empty()) config.schema = flags.schema;
    if (given("--db")) config.database_url = loaded.config->WithDbPassword(flags.db);
    if (given("--brokers")) config.kafka_brokers = flags.brokers;
    if (given("--replies-topic")) config.replies_topic = flags.replies_topic;
    if (flags.no_create_topics) config.create_topics = false;
    for (const auto& [key, value] : sagaflow::outbox::ParseKafkaProperties(flags.consumer_properties)) {
        config.consumer_properties[key] = value;
    }
    if (given("--inbox-ttl-hours")) config.inbox_ttl = std::chrono::hours(flags.inbox_ttl_hours);
    config.kafka_properties.try_emplace("log_level", "3");
    if (config.database_url.empty() || config.kafka_brokers.empty()) {
        std::cerr << config.name << ": no " << (config.database_url.empty() ? "database" : "Kafka brokers") << ": pass "
                  << (config.database_url.empty() ? "--db" : "--brokers") << ", or --config FILE with "
                  << (config.database_url.empty() ? "db.url" : "kafka.brokers") << ", or set "
                  << (config.database_url.empty() ? "SAGAFLOW_DB_URL" : "SAGAFLOW_KAFKA_BROKERS") << "\n";
        std::exit(1);
    }
    return config;
}

inline std::atomic<bool> g_stop{false};

// Starts the participant, prints progress every 5 s, stops on SIGINT/SIGTERM.
inline int RunUntilSignalled(sagaflow::Participant& participant, const std::string& name) {
    std::signal(SIGINT, [](int) { g_stop = true; });
    std::signal(SIGTERM, [](int) { g_stop = true; });
    try {
        participant.Start();
    } catch (const std::exception& e) {
        std::cerr << name << ": cannot start: " << e.what() << std::endl;
        return 1;
    }
    std::cerr << name << ": running" << std::endl;
    for (int tick = 0; !g_stop.load(); ++tick) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (tick % 50 == 49) {
            const auto m = participant.Metrics();
            std::cerr << name << ": applied " << m.applied << ", replayed " << m.replayed << ", duplicates dropped "
                      << m.duplicates << ", null compensations " << m.null_compensations << ", refused late actions "
                      << m.refused_late_actions
                      << (m.consumer_restarts != 0 ? ", consumer restarts " + std::to_string(m.consumer_restarts) : "")
                      << std::endl;
        }
    }
    participant.Stop();
    return 0;
}

}  // namespace example
