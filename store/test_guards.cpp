#include "store/test_guards.hpp"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

namespace sagaflow::store {

bool GuardDisabled(std::string_view guard) {
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
}

}  // namespace sagaflow::store
