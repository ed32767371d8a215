#pragma once
// The sample order-payment saga with its example services as separate processes, on a scratch
// database, under participant and topic names of its own (so tests on one broker never meet): what
// the guard and chaos tests share. The engine runs as `sagaflow run` processes; sagas are started
// by an in-process front end.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "tests/support/services.hpp"
#include "tools/audit.hpp"
#include "tools/child_process.hpp"

namespace sagaflow::testing {

class ExampleRig {
  public:
    // `create_topics` false: the caller creates them (a mock cluster has no admin API) and the
    // processes are told not to.
    explicit ExampleRig(std::string brokers = KafkaBrokers(), std::string db_url = {}, bool create_topics = true);
    ~ExampleRig();
    ExampleRig(const ExampleRig&) = delete;
    ExampleRig& operator=(const ExampleRig&) = delete;

    using Process = std::unique_ptr<detail::ChildProcess>;
    // `env`: e.g. {"SAGAFLOW_TEST_DISABLE_GUARD=inbox"}; `extra`: more command-line arguments;
    // `cli`: another sagaflow binary (an earlier release's).
    Process SpawnEngine(const std::string& instance,
                        const std::vector<std::string>& env = {},
                        const std::vector<std::string>& extra = {},
                        const std::string& cli = {}) const;
    Process SpawnRelay() const;  // `sagaflow relay` for an engine started with --no-relay
    Process SpawnOrderService(const std::vector<std::string>& env = {},
                              const std::vector<std::string>& extra = {}) const;
    Process SpawnPaymentService(const std::vector<std::string>& env = {},
                                const std::vector<std::string>& extra = {}) const;
    // The TypeScript payment service (examples/payment-ts; SAGAFLOW_PAYMENT_TS names its dist/main.js)
    // in schema payments, as docs/protocol.md tells a participant outside C++: its tables made by
    // `sagaflow migrate`, its replies published by a `sagaflow relay` (the first process returned).
    std::vector<Process> SpawnNodePaymentService(const std::vector<std::string>& extra = {}) const;
    // An engine in this process that only starts and reads sagas.
    std::unique_ptr<Engine> FrontEnd() const;

    // An order-payment input; amounts over 500 are declined by the payment service.
    static nlohmann::json Input(const std::string& order_id, const std::string& amount);
    long long Open() const;
    // Waits until no saga is open and every outbox is drained; false on timeout.
    bool WaitQuiet(std::chrono::seconds timeout) const;
    AuditReport Audit() const;

    const std::string& DbUrl() const { return db_url_; }
    const std::string& Brokers() const { return brokers_; }
    const std::string& OrderName() const { return order_; }
    const std::string& PaymentName() const { return payment_; }
    const std::string& Replies() const { return replies_; }
    const std::string& EngineGroup() const { return group_; }
    const std::string& LogDir() const { return logs_; }

  private:
    std::unique_ptr<ScratchDatabase> scratch_;
    std::string db_url_;
    std::string brokers_;
    std::string suffix_;
    std::string order_, payment_, replies_, group_;
    std::string yaml_;
    std::string yaml_path_;
    std::string logs_;
    bool create_topics_ = true;
};

// Re-publishes the last `count` published rows of an outbox table, as a relay that crashed between
// the broker's acknowledgement and its commit would: same event id, same bytes. Returns how many.
int Redeliver(const std::string& db_url, const std::string& brokers, const std::string& table, int count);

}  // namespace sagaflow::testing
