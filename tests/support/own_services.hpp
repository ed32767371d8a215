#pragma once
// A PostgreSQL cluster and a Kafka broker of a test's own, for tests that stop or restart them
// (the shared ones must not go down under other tests). Removed at the end; a killed test run's
// leftovers are stopped by the scripts' watchdogs (owner: this process).

#include <string>

namespace sagaflow::testing {

class OwnBroker {
  public:
    OwnBroker();
    ~OwnBroker();
    OwnBroker(const OwnBroker&) = delete;
    OwnBroker& operator=(const OwnBroker&) = delete;
    int Run(const std::string& args) const;  // scripts/kafka/run ARGS
    const std::string& Brokers() const { return brokers_; }
    const std::string& State() const { return state_; }

  private:
    std::string script_;
    std::string state_;
    std::string brokers_;
};

class OwnPostgres {
  public:
    OwnPostgres();
    ~OwnPostgres();
    OwnPostgres(const OwnPostgres&) = delete;
    OwnPostgres& operator=(const OwnPostgres&) = delete;
    // An immediate restart: like a crash, the server recovers from its WAL; same port.
    int Restart() const;
    // Stops the server for good (and removes it): the database is gone until the test ends.
    int Shutdown() const;
    const std::string& Url() const { return url_; }

  private:
    std::string script_;
    std::string state_;
    std::string url_;
};

}  // namespace sagaflow::testing
