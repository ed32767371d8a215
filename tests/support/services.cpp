#include "tests/support/services.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <pqxx/pqxx>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "outbox/admin.hpp"

namespace sagaflow::testing {
namespace {

std::string FromEnvOrFile(const char* env, const char* file, const char* what) {
    if (const char* value = std::getenv(env); value != nullptr && *value != '\0') {
        return value;
    }
    const char* dir = std::getenv("SAGAFLOW_SERVICES_DIR");
    if (dir == nullptr) {
        throw std::runtime_error(std::string("no ") + what + ": neither " + env +
                                 " nor SAGAFLOW_SERVICES_DIR is set. Hint: run the tests through ctest, which starts "
                                 "the private servers, or set " +
                                 env);
    }
    const std::string path = std::string(dir) + "/" + file;
    std::ifstream in(path);
    std::string line;
    if (!in || !std::getline(in, line) || line.empty()) {
        throw std::runtime_error(std::string("no ") + what + ": " + path +
                                 " is missing. Hint: the CTest fixture that starts it failed or did not run; "
                                 "see the output of the services.* tests");
    }
    return line;
}

}  // namespace

std::string PgUrl() {
    return FromEnvOrFile("SAGAFLOW_PG_URL", "pg/url", "PostgreSQL");
}

std::string KafkaBrokers() {
    return FromEnvOrFile("SAGAFLOW_KAFKA_BROKERS", "kafka/brokers", "Kafka broker");
}

std::string UniqueName(std::string_view prefix) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    std::ostringstream out;
    out << prefix << '_' << std::hex << rng();
    return out.str();
}

std::string WithDatabase(const std::string& url, const std::string& database) {
    const auto scheme = url.find("://");
    const auto path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
    if (path == std::string::npos) {
        return url + "/" + database;
    }
    const auto query = url.find('?', path);
    return url.substr(0, path + 1) + database + (query == std::string::npos ? "" : url.substr(query));
}

ScratchDatabase::ScratchDatabase() : name_(UniqueName("t")), url_(WithDatabase(PgUrl(), name_)) {
    pqxx::connection admin{PgUrl()};
    pqxx::nontransaction tx{admin};
    tx.exec("CREATE DATABASE " + tx.quote_name(name_) + " TEMPLATE template0");
}

ScratchDatabase::~ScratchDatabase() {
    try {
        pqxx::connection admin{PgUrl()};
        pqxx::nontransaction tx{admin};
        tx.exec("DROP DATABASE IF EXISTS " + tx.quote_name(name_) + " WITH (FORCE)");
    } catch (...) {  // NOLINT(bugprone-empty-catch): the cluster is thrown away after the run anyway
    }
}

long long Count(const std::string& url, const std::string& sql) {
    pqxx::connection conn{url};
    pqxx::read_transaction tx{conn};
    return tx.exec1(sql)[0].as<long long>();
}

long long SagaRowCount(const std::string& url, const std::string& saga_id) {
    return Count(url,
                 "SELECT (SELECT count(*) FROM saga_instance WHERE saga_id = '" + saga_id +
                     "') + (SELECT count(*) FROM saga_step WHERE saga_id = '" + saga_id +
                     "') + (SELECT count(*) FROM saga_timeline WHERE saga_id = '" + saga_id + "')");
}

void Execute(const std::string& url, const std::string& sql) {
    pqxx::connection conn{url};
    pqxx::work tx{conn};
    tx.exec(sql);
    tx.commit();
}

bool WaitFor(const std::function<bool()>& done, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (done()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return done();
}

std::string RequiredEnv(const char* name) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') {
        throw std::runtime_error(std::string(name) + " is not set. Hint: run this test through ctest");
    }
    return value;
}

std::string SagaflowCli() {
    return RequiredEnv("SAGAFLOW_CLI");
}

std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

int WaitForHttpPort(const std::string& log_path, std::chrono::seconds timeout) {
    static constexpr std::string_view kLine = "HTTP API on port ";
    int port = 0;
    WaitFor(
        [&] {
            const std::string log = ReadFile(log_path);
            const auto at = log.find(kLine);
            if (at != std::string::npos) port = std::stoi(log.substr(at + kLine.size()));
            return port != 0;
        },
        timeout);
    return port;
}

CliRun RunCli(const std::string& args) {
    const std::string base = "/tmp/" + UniqueName("sagaflow-cli");
    const int status = std::system((SagaflowCli() + " " + args + " >" + base + ".out 2>" + base + ".err").c_str());
    const auto slurp = [](const std::string& path) {
        std::string text = ReadFile(path);
        std::remove(path.c_str());
        return text;
    };
    CliRun run;
    run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.out = slurp(base + ".out");
    run.err = slurp(base + ".err");
    return run;
}

void CreateTopic(const std::string& brokers, const std::string& topic, int partitions) {
    outbox::EnsureTopicsBlocking(brokers, {}, {topic}, partitions);
}

}  // namespace sagaflow::testing
