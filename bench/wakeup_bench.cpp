// What one wake-up costs on this machine: two threads hand a turn back and forth through a
// condition variable, each sleeping until the other wakes it, as a consumer thread and a pool
// worker do, or a client and its PostgreSQL backend. Printed per round trip (two wake-ups): the
// wall time and the CPU time of the process, once with the threads free to run on any CPU and once
// with both pinned to CPU 0 (a wake-up on the same CPU needs no inter-processor interrupt).
//   build/release/bench/wakeup_bench [ROUND_TRIPS]     (default 200000)
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace {

double CpuMicros() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const auto micros = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec);
    };
    return micros(usage.ru_utime) + micros(usage.ru_stime);
}

void PinToCpu0() {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

void Measure(const char* name, int round_trips, bool pinned) {
    std::mutex mutex;
    std::condition_variable turn_changed;
    bool other_turn = false;
    const double cpu_before = CpuMicros();
    const auto wall_before = std::chrono::steady_clock::now();
    std::thread other{[&] {
        if (pinned) PinToCpu0();
        for (int i = 0; i < round_trips; ++i) {
            std::unique_lock lock{mutex};
            turn_changed.wait(lock, [&] { return other_turn; });
            other_turn = false;
            turn_changed.notify_one();
        }
    }};
    cpu_set_t original;
    pthread_getaffinity_np(pthread_self(), sizeof(original), &original);
    if (pinned) PinToCpu0();
    for (int i = 0; i < round_trips; ++i) {
        std::unique_lock lock{mutex};
        other_turn = true;
        turn_changed.notify_one();
        turn_changed.wait(lock, [&] { return !other_turn; });
    }
    other.join();
    const double wall =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - wall_before).count();
    std::printf("%-26s %7.1f us wall, %7.1f us CPU per round trip (two wake-ups)\n",
                name,
                wall / round_trips,
                (CpuMicros() - cpu_before) / round_trips);
    if (pinned) pthread_setaffinity_np(pthread_self(), sizeof(original), &original);  // back for the caller
}

}  // namespace

int main(int argc, char** argv) {
    const int round_trips = argc > 1 ? std::atoi(argv[1]) : 200'000;
    if (round_trips <= 0) {
        std::fprintf(stderr, "usage: wakeup_bench [ROUND_TRIPS > 0]\n");
        return 2;
    }
    Measure("threads on any CPU:", round_trips, false);
    Measure("both threads on CPU 0:", round_trips, true);
}
