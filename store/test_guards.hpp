#pragma once
// Test-only switches that disable one guard, to prove the audit catches its absence, or inject a
// fault that a test cannot cause from outside.
// SAGAFLOW_TEST_DISABLE_GUARD=inbox,dispatch-dedup,anti-hanging,payment-unique,reanswer disables those
// (reanswer: a participant skips a command it has answered instead of sending the stored reply);
// unset (always, in production) disables nothing. A process with a disabled guard says so loudly.
// Compiled in only with the CMake option SAGAFLOW_TEST_SWITCHES (the dev, asan and tsan presets);
// any other build ignores the variable.

#include <string_view>

namespace sagaflow::store {

// True when `guard` is listed in SAGAFLOW_TEST_DISABLE_GUARD (read once per process).
bool GuardDisabled(std::string_view guard);

// True when `fault` is listed in SAGAFLOW_TEST_FAULT (read at each call: a test sets it around the
// part it breaks). Faults that cannot be caused from outside the process: `rewind` (the consumer's
// seek back to a failed batch reports failure without seeking), `start-reply-lost` (an embedded
// start's statement commits, then its connection is closed before the answer is read).
bool TestFault(std::string_view fault);

}  // namespace sagaflow::store
