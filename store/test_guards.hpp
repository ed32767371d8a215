#pragma once
// Test-only switches that disable one guard, to prove the audit catches its absence (issue 9).
// SAGAFLOW_TEST_DISABLE_GUARD=inbox,dispatch-dedup,anti-hanging,payment-unique disables those;
// unset (always, in production) disables nothing. A process with a disabled guard says so loudly.
// Compiled in only with the CMake option SAGAFLOW_TEST_SWITCHES (the dev, asan and tsan presets);
// any other build ignores the variable.

#include <string_view>

namespace sagaflow::store {

// True when `guard` is listed in SAGAFLOW_TEST_DISABLE_GUARD (read once per process).
bool GuardDisabled(std::string_view guard);

}  // namespace sagaflow::store
