#include "core/version.hpp"

namespace sagaflow {

std::string_view Version() noexcept {
    return SAGAFLOW_VERSION;
}

}  // namespace sagaflow
