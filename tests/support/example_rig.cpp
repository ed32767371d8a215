#include "tests/support/example_rig.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <stdexcept>

#include <pqxx/pqxx>

#include "outbox/detail/rdkafka.hpp"

namespace sagaflow::testing {

ExampleRig::ExampleRig(std::string brokers, std::string db_url, bool create_topics)
    : brokers_(std::move(brokers)), create_topics_(create_topics) {
    if (db_url.empty()) {
        scratch_ = std::make_unique<ScratchDatabase>();
        db_url_ = scratch_->Url();
    } else {
        db_url_ = std::move(db_url);
    }
    suffix_ = UniqueName("x").substr(2);
    order_ = "order-" + suffix_;
    payment_ = "payment-" + suffix_;
    replies_ = "replies-" + suffix_;
    group_ = "engine-" + suffix_;
    yaml_ = std::regex_replace(ReadFile(RequiredEnv("SAGAFLOW_SOURCE_DIR") + "/sagas/order-payment.yaml"),
                               std::regex("participant: order"),
                               "participant: " + order_);
    yaml_ = std::regex_replace(yaml_, std::regex("participant: payment"), "participant: " + payment_);
    logs_ = std::filesystem::temp_directory_path() / ("sagaflow-rig-" + suffix_);
    std::filesystem::create_directories(logs_);
    yaml_path_ = logs_ + "/order-payment.yaml";
    std::ofstream(yaml_path_) << yaml_;
    if (create_topics_) {
        for (const auto& topic : {order_ + ".commands", payment_ + ".commands", replies_}) {
            CreateTopic(brokers_, topic, 4);
        }
    }
}

ExampleRig::~ExampleRig() {
    if (std::getenv("SAGAFLOW_KEEP_LOGS") != nullptr) return;  // for a look at the processes' logs
    std::error_code ignored;
    std::filesystem::remove_all(logs_, ignored);
}

ExampleRig::Process ExampleRig::SpawnEngine(const std::string& instance,
                                            const std::vector<std::string>& env,
                                            const std::vector<std::string>& extra,
                                            const std::string& cli) const {
    std::vector<std::string> args{"run",
                                  "--db",
                                  db_url_,
                                  "--brokers",
                                  brokers_,
                                  "--saga",
                                  yaml_path_,
                                  "--group",
                                  group_,
                                  "--replies-topic",
                                  replies_,
                                  "--instance",
                                  instance,
                                  "--static-membership",
                                  "--consumer-property",
                                  "session.timeout.ms=6000",
                                  "--kafka-property",
                                  "log_level=3"};
    if (!create_topics_) args.emplace_back("--no-create-topics");
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<detail::ChildProcess>(
        cli.empty() ? SagaflowCli() : cli, args, logs_ + "/" + instance + ".log", env);
}

ExampleRig::Process ExampleRig::SpawnRelay() const {
    return std::make_unique<detail::ChildProcess>(
        SagaflowCli(), std::vector<std::string>{"relay", "--db", db_url_, "--brokers", brokers_}, logs_ + "/relay.log");
}

namespace {

ExampleRig::Process SpawnService(const std::string& binary,
                                 bool create_topics,
                                 const std::string& name,
                                 const std::string& db_url,
                                 const std::string& brokers,
                                 const std::string& replies,
                                 const std::string& log,
                                 const std::vector<std::string>& env,
                                 const std::vector<std::string>& extra) {
    std::vector<std::string> args{"--db",
                                  db_url,
                                  "--brokers",
                                  brokers,
                                  "--name",
                                  name,
                                  "--replies-topic",
                                  replies,
                                  "--consumer-property",
                                  "session.timeout.ms=6000"};
    if (!create_topics) args.emplace_back("--no-create-topics");
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<detail::ChildProcess>(RequiredEnv("SAGAFLOW_SERVICES_BIN") + "/" + binary, args, log, env);
}

}  // namespace

ExampleRig::Process ExampleRig::SpawnOrderService(const std::vector<std::string>& env,
                                                  const std::vector<std::string>& extra) const {
    return SpawnService("sagaflow-order-service",
                        create_topics_,
                        order_,
                        db_url_,
                        brokers_,
                        replies_,
                        logs_ + "/order.log",
                        env,
                        extra);
}

ExampleRig::Process ExampleRig::SpawnPaymentService(const std::vector<std::string>& env,
                                                    const std::vector<std::string>& extra) const {
    return SpawnService("sagaflow-payment-service",
                        create_topics_,
                        payment_,
                        db_url_,
                        brokers_,
                        replies_,
                        logs_ + "/payment.log",
                        env,
                        extra);
}

std::vector<ExampleRig::Process> ExampleRig::SpawnNodePaymentService(const std::vector<std::string>& extra) const {
    const std::string url =
        db_url_ + (db_url_.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3Dpayments";
    const CliRun migrated = RunCli("migrate --db '" + url + "'");
    if (migrated.code != 0) throw std::runtime_error("sagaflow migrate of schema payments failed: " + migrated.err);
    std::vector<Process> processes;
    processes.push_back(
        std::make_unique<detail::ChildProcess>(SagaflowCli(),
                                               std::vector<std::string>{"relay", "--db", url, "--brokers", brokers_},
                                               logs_ + "/payment-relay.log"));
    std::vector<std::string> args{"node",
                                  RequiredEnv("SAGAFLOW_PAYMENT_TS"),
                                  "--db",
                                  db_url_,
                                  "--brokers",
                                  brokers_,
                                  "--name",
                                  payment_,
                                  "--replies-topic",
                                  replies_,
                                  "--consumer-property",
                                  "session.timeout.ms=6000"};
    if (!create_topics_) args.emplace_back("--no-create-topics");
    args.insert(args.end(), extra.begin(), extra.end());
    processes.push_back(std::make_unique<detail::ChildProcess>("/usr/bin/env", args, logs_ + "/payment-ts.log"));
    return processes;
}

std::unique_ptr<Engine> ExampleRig::FrontEnd() const {
    EngineConfig config;
    config.database_url = db_url_;
    config.kafka_brokers = brokers_;
    config.replies_topic = replies_;
    config.consumer_group = group_;
    config.process_sagas = false;
    config.run_relay = false;
    config.create_topics = false;
    auto engine = std::make_unique<Engine>(config);
    engine->RegisterDefinition(yaml_, "order-payment.yaml");
    engine->Start();
    return engine;
}

nlohmann::json ExampleRig::Input(const std::string& order_id, const std::string& amount) {
    return {{"orderId", order_id}, {"customerId", 7}, {"amount", amount}};
}

long long ExampleRig::Open() const {
    return Count(db_url_, "SELECT count(*) FROM saga_instance WHERE status IN ('running', 'compensating')");
}

bool ExampleRig::WaitQuiet(std::chrono::seconds timeout) const {
    return WaitFor(
        [&] {
            return Open() == 0 &&
                   Count(db_url_,
                         "SELECT (SELECT count(*) FROM outbox WHERE published_at IS NULL) + (SELECT count(*) FROM "
                         "orders.outbox WHERE published_at IS NULL) + (SELECT count(*) FROM payments.outbox WHERE "
                         "published_at IS NULL)") == 0;
        },
        timeout);
}

AuditReport ExampleRig::Audit() const {
    AuditOptions options;
    options.db_url = db_url_;
    options.participant_schemas = {"orders", "payments"};
    options.payments_schema = "payments";
    return AuditBlocking(options);
}

}  // namespace sagaflow::testing

namespace sagaflow::testing {

int Redeliver(const std::string& db_url, const std::string& brokers, const std::string& table, int count) {
    using namespace outbox::detail;
    auto producer = MakeClient(RD_KAFKA_PRODUCER,
                               MakeProducerConf({{"bootstrap.servers", brokers},
                                                 {"enable.idempotence", "true"},
                                                 {"log_level", "0"},
                                                 {"message.timeout.ms", "10000"}}));
    pqxx::connection conn{db_url};
    pqxx::read_transaction tx{conn};
    int produced = 0;
    for (const auto& row : tx.exec("SELECT topic, message_key, payload::text FROM " + table +
                                   " WHERE published_at IS NOT NULL ORDER BY id DESC LIMIT " + std::to_string(count))) {
        if (Produce(producer.get(),
                    row[0].as<std::string>(),
                    row[1].as<std::string>(),
                    row[2].as<std::string>(),
                    nullptr,
                    nullptr) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            ++produced;
        }
    }
    rd_kafka_flush(producer.get(), 10'000);
    return produced;
}

}  // namespace sagaflow::testing
