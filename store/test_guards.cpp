#include "store/test_guards.hpp"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

namespace sagaflow::store {

bool GuardDisabled(std::string_view guard) {
#ifndef SAGAFLOW_TEST_SWITCHES
    // A build without the switches (release, an installed library) never weakens a guarantee; it
    // says once that the variable is ignored, so a forgotten one in a deployment is seen.
    static const bool warned = [] {
        if (std::getenv("SAGAFLOW_TEST_DISABLE_GUARD") != nullptr) {
            spdlog::warn("SAGAFLOW_TEST_DISABLE_GUARD is set and ignored: this build has no test switches");
        }
        return true;
    }();
    static_cast<void>(warned);
    static_cast<void>(guard);
    return false;
#else
    static const std::set<std::string> disabled = [] {
        std::set<std::string> out;
        if (const char* env = std::getenv("SAGAFLOW_TEST_DISABLE_GUARD"); env != nullptr) {
            std::istringstream in(env);
            std::string name;
            while (std::getline(in, name, ',')) {
                if (name.empty()) continue;
                out.insert(name);
                spdlog::warn(
                    "TEST ONLY: guard '{}' is disabled (SAGAFLOW_TEST_DISABLE_GUARD); never do this in "
                    "production",
                    name);
            }
        }
        return out;
    }();
    return disabled.count(std::string(guard)) != 0;
#endif
}

bool TestFault(std::string_view fault) {
#ifndef SAGAFLOW_TEST_SWITCHES
    static_cast<void>(fault);
    return false;
#else
    const char* env = std::getenv("SAGAFLOW_TEST_FAULT");
    if (env == nullptr) return false;
    std::istringstream in(env);
    std::string name;
    while (std::getline(in, name, ',')) {
        if (name == fault) {
            spdlog::warn("TEST ONLY: injecting fault '{}' (SAGAFLOW_TEST_FAULT)", name);
            return true;
        }
    }
    return false;
#endif
}

}  // namespace sagaflow::store
