#pragma once
// What the two example services share: their command line, and running a Participant until
// SIGINT/SIGTERM with a progress line every few seconds.

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <string>
#include <thread>

#include "engine/participant.hpp"
#include "outbox/kafka.hpp"

namespace example {

struct ServiceFlags {
    std::string name;  // the participant name (the saga's `participant:`)
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
    app.add_option("--db", flags.db, "PostgreSQL URL")->required();
    app.add_option("--schema", flags.schema, "the service's own schema")->capture_default_str();
    app.add_option("--brokers", flags.brokers, "Kafka bootstrap servers")->required();
    app.add_option("--replies-topic", flags.replies_topic, "where replies go")->capture_default_str();
    app.add_flag("--no-create-topics", flags.no_create_topics, "the topics exist already (embedded Kafka)");
    app.add_option("--consumer-property", flags.consumer_properties, "librdkafka KEY=VALUE for the command consumer");
    app.add_option("--inbox-ttl-hours",
                   flags.inbox_ttl_hours,
                   "how long a command's event id is remembered (redeliveries dropped); swept daily")
        ->check(CLI::Range(24, 72))
        ->capture_default_str();
}

inline sagaflow::ParticipantConfig ConfigFrom(const ServiceFlags& flags) {
    sagaflow::ParticipantConfig config;
    config.name = flags.name;
    config.database_url = flags.db;
    config.schema = flags.schema;
    config.kafka_brokers = flags.brokers;
    config.replies_topic = flags.replies_topic;
    config.create_topics = !flags.no_create_topics;
    config.kafka_properties["log_level"] = "3";
    config.consumer_properties = sagaflow::outbox::ParseKafkaProperties(flags.consumer_properties);
    config.inbox_ttl = std::chrono::hours(flags.inbox_ttl_hours);
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
