#pragma once
// A child process for tests that kill and restart sagaflow binaries.

#include <sys/types.h>

#include <string>
#include <vector>

namespace sagaflow::testing {

class ChildProcess {
  public:
    // Starts `program` with `args`; its stderr goes to `log_file` (appended), or nowhere if empty.
    ChildProcess(const std::string& program, const std::vector<std::string>& args, const std::string& log_file = {});
    ~ChildProcess();  // SIGKILL if still running
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;

    pid_t Pid() const noexcept { return pid_; }
    // Sends `signal` and waits for the end; returns the raw waitpid status.
    int KillAndWait(int signal);

  private:
    pid_t pid_ = -1;
};

// The sagaflow CLI the tests run (SAGAFLOW_CLI, set by ctest); fails the test when missing.
std::string SagaflowCli();

}  // namespace sagaflow::testing
