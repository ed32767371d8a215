#pragma once

#include <string_view>

namespace sagaflow {

// The engine's version, as set in the top-level CMakeLists.txt.
std::string_view Version() noexcept;

}  // namespace sagaflow
