#pragma once
// Starts a thread under a name that top -H, ps -L, perf and gdb show (sf-relay, sf-db-0, ...). The
// kernel keeps 15 characters; a longer name is cut there rather than refused.

#include <pthread.h>

#include <string>
#include <thread>
#include <utility>

namespace sagaflow::store {

// Names the calling thread.
inline void NameThisThread(const std::string& name) {
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

// Names the calling thread the first time a thread calls it: for threads a library starts (an
// asio::thread_pool's), named by the first job each one runs.
inline void NameThisThreadOnce(const std::string& name) {
    thread_local bool named = false;
    if (named) return;
    NameThisThread(name);
    named = true;
}

template <typename F>
std::thread NamedThread(std::string name, F body) {
    return std::thread([name = std::move(name), body = std::move(body)]() mutable {
        NameThisThread(name);
        body();
    });
}

}  // namespace sagaflow::store
