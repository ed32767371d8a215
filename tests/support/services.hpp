#pragma once
// Where the tests find their servers: SAGAFLOW_PG_URL / SAGAFLOW_KAFKA_BROKERS when set, else the
// private servers the CTest fixtures started (their addresses are files under
// SAGAFLOW_SERVICES_DIR). A test that cannot find its server fails loudly; it never skips.

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace sagaflow::testing {

// The PostgreSQL URL of the test cluster (its `sagaflow` database).
std::string PgUrl();

// The bootstrap servers of the test broker.
std::string KafkaBrokers();

// A name no other test run uses: prefix + '_' + random hex, lowercase, usable as a database or topic.
std::string UniqueName(std::string_view prefix);

// `url` with its database replaced by `database`.
std::string WithDatabase(const std::string& url, const std::string& database);

// A database of its own for one test, created from template0 and dropped at the end.
class ScratchDatabase {
  public:
    ScratchDatabase();
    ~ScratchDatabase();
    ScratchDatabase(const ScratchDatabase&) = delete;
    ScratchDatabase& operator=(const ScratchDatabase&) = delete;

    const std::string& Url() const { return url_; }
    const std::string& Name() const { return name_; }

  private:
    std::string name_;
    std::string url_;
};

// Creates a topic with `partitions` partitions on the test broker and waits until it is usable.
void CreateTopic(const std::string& brokers, const std::string& topic, int partitions);

// The single number `sql` returns, read on a connection of its own.
long long Count(const std::string& url, const std::string& sql);

// How many rows saga `saga_id` has in saga_instance and saga_step, and entries in its timeline, together.
long long SagaRowCount(const std::string& url, const std::string& saga_id);

// Runs `sql` in a transaction of its own and commits (test setup: DDL, damage, repairs).
void Execute(const std::string& url, const std::string& sql);

// Polls `done` every 100 ms until it holds or `timeout` passes; returns its last answer.
bool WaitFor(const std::function<bool()>& done, std::chrono::seconds timeout);

// The value of an environment variable ctest sets; throws naming the fix when it is missing.
std::string RequiredEnv(const char* name);

// The sagaflow CLI the tests run (SAGAFLOW_CLI, set by ctest); throws naming the fix when missing.
std::string SagaflowCli();

// The whole file ("" if it cannot be read).
std::string ReadFile(const std::string& path);

// The port a `sagaflow run --http ADDRESS:0` reports in its log ("HTTP API on port N"), once it
// has; 0 if it has not within `timeout`.
int WaitForHttpPort(const std::string& log_path, std::chrono::seconds timeout);

// Runs `sagaflow <args>` (args as a shell would split them); its exit code and what it wrote to
// stdout and stderr.
struct CliRun {
    int code = -1;
    std::string out, err;
};
CliRun RunCli(const std::string& args);

}  // namespace sagaflow::testing
