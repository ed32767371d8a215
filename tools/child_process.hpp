#pragma once
// A child process: the demo runs the example services with it, and the tests kill and restart
// sagaflow binaries with it. The child is killed (SIGKILL, PR_SET_PDEATHSIG) when the thread that
// started it ends, so a crashed parent leaves no orphans: start children from a thread that
// outlives them (the main thread).

#include <sys/types.h>

#include <string>
#include <vector>

namespace sagaflow::detail {

class ChildProcess {
  public:
    // Starts `program` with `args`; its stderr goes to `log_file` (appended), or nowhere if empty;
    // `env` entries ("NAME=VALUE") are added to its environment.
    ChildProcess(const std::string& program,
                 const std::vector<std::string>& args,
                 const std::string& log_file = {},
                 const std::vector<std::string>& env = {});
    ~ChildProcess();  // SIGKILL if still running
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;

    pid_t Pid() const noexcept { return pid_; }
    // Sends `signal` and waits for the end; returns the raw waitpid status.
    int KillAndWait(int signal);
    // Waits for the child to end by itself; returns the raw waitpid status.
    int Wait();
    // True while the child runs (reaps it if it ended).
    bool Running();

  private:
    pid_t pid_ = -1;
};

}  // namespace sagaflow::detail
