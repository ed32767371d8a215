#include "tools/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace sagaflow::detail {

ChildProcess::ChildProcess(const std::string& program,
                           const std::vector<std::string>& args,
                           const std::string& log_file,
                           const std::vector<std::string>& env) {
    std::vector<std::string> all{program};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& arg : all) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
        // The child never outlives its starter: a crashed demo or test would otherwise leave
        // engines and services running against servers that are gone.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);  // the parent died before the line above
        const int fd = log_file.empty() ? open("/dev/null", O_WRONLY)
                                        : open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            dup2(fd, STDOUT_FILENO);
        }
        for (const auto& entry : env) {
            const auto eq = entry.find('=');
            if (eq != std::string::npos) setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
        }
        execv(program.c_str(), argv.data());
        _exit(127);
    }
}

ChildProcess::~ChildProcess() {
    if (pid_ > 0) KillAndWait(SIGKILL);
}

bool ChildProcess::Running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
    }
    return true;
}

int ChildProcess::Wait() {
    if (pid_ <= 0) return 0;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
}

int ChildProcess::KillAndWait(int signal) {
    if (pid_ <= 0) return 0;
    kill(pid_, signal);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
}

}  // namespace sagaflow::detail
