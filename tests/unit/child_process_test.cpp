#include "tools/child_process.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

using sagaflow::detail::ChildProcess;

namespace {

// Gone, or a zombie waiting for whoever adopted it: either way it runs no more.
bool Ended(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    const auto close = line.rfind(')');
    return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

}  // namespace

TEST_CASE("a child process dies with the process that started it, even one killed with SIGKILL") {
    int pipe_fds[2];
    REQUIRE(pipe(pipe_fds) == 0);
    const pid_t starter = fork();
    REQUIRE(starter >= 0);
    if (starter == 0) {  // the starter: spawns a long sleep, reports its pid, then waits to be killed
        close(pipe_fds[0]);
        ChildProcess sleeper{"/bin/sleep", {"300"}};
        const pid_t pid = sleeper.Pid();
        if (write(pipe_fds[1], &pid, sizeof pid) != sizeof pid) _exit(1);
        pause();
        _exit(0);
    }
    close(pipe_fds[1]);
    pid_t grandchild = -1;
    REQUIRE(read(pipe_fds[0], &grandchild, sizeof grandchild) == sizeof grandchild);
    close(pipe_fds[0]);
    REQUIRE(grandchild > 0);
    CHECK_FALSE(Ended(grandchild));  // running while its starter lives

    kill(starter, SIGKILL);  // no destructor runs: only the kernel can end the grandchild now
    waitpid(starter, nullptr, 0);
    bool ended = false;
    for (int i = 0; i < 100 && !ended; ++i) {
        ended = Ended(grandchild);
        if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    CHECK(ended);
    if (!ended) kill(grandchild, SIGKILL);
}
