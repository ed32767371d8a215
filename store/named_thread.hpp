#pragma once
// Starts a thread under a name that top -H, ps -L, perf and gdb show (sf-relay, sf-db-0, ...). The
// kernel keeps 15 characters; a longer name is cut there rather than refused.

#include <pthread.h>

#include <string>
#include <thread>
#include <utility>

namespace sagaflow::store {

template <typename F>
std::thread NamedThread(std::string name, F body) {
    return std::thread([name = std::move(name), body = std::move(body)]() mutable {
        pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
        body();
    });
}

}  // namespace sagaflow::store
