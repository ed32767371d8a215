#include "tests/support/own_services.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "tests/support/services.hpp"

namespace sagaflow::testing {
namespace {

std::string FirstLine(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

}  // namespace

OwnBroker::OwnBroker()
    : script_(RequiredEnv("SAGAFLOW_SOURCE_DIR") + "/scripts/kafka/run"),
      state_(RequiredEnv("SAGAFLOW_SERVICES_DIR") + "/" + UniqueName("kafka-own")) {
    if (Run("start " + state_ + " --owner " + std::to_string(getpid()) + " --probe " +
            RequiredEnv("SAGAFLOW_KAFKA_PROBE") + " >/dev/null") != 0) {
        throw std::runtime_error("could not start a broker of this test's own; see the output above");
    }
    brokers_ = FirstLine(state_ + "/brokers");
}

OwnBroker::~OwnBroker() {
    Run("stop " + state_ + " >/dev/null 2>&1");
}

int OwnBroker::Run(const std::string& args) const {
    return std::system((script_ + " " + args).c_str());
}

OwnPostgres::OwnPostgres()
    : script_(RequiredEnv("SAGAFLOW_SOURCE_DIR") + "/scripts/pg"),
      state_(RequiredEnv("SAGAFLOW_SERVICES_DIR") + "/" + UniqueName("pg-own")) {
    if (std::system((script_ + " start " + state_ + " --owner " + std::to_string(getpid()) + " >/dev/null").c_str()) !=
        0) {
        throw std::runtime_error("could not start a PostgreSQL of this test's own; see the output above");
    }
    url_ = FirstLine(state_ + "/url");
}

OwnPostgres::~OwnPostgres() {
    static_cast<void>(std::system((script_ + " stop " + state_ + " >/dev/null 2>&1").c_str()));
}

int OwnPostgres::Shutdown() const {
    return std::system((script_ + " stop " + state_ + " >/dev/null").c_str());
}

int OwnPostgres::Restart() const {
    return std::system((script_ + " restart " + state_ + " >/dev/null").c_str());
}

}  // namespace sagaflow::testing
