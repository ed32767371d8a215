// Whether SAGAFLOW_TEST_DISABLE_GUARD and SAGAFLOW_TEST_FAULT take effect in a build of store/test_guards.cpp: exits 0
// when the answer is the expected one (argv[1]: "ignored" for a build without SAGAFLOW_TEST_SWITCHES, as every release
// build; "honoured" for one with it), 1 otherwise.
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "store/test_guards.hpp"

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    setenv("SAGAFLOW_TEST_DISABLE_GUARD", "inbox,dispatch-dedup,anti-hanging,payment-unique", 1);
    setenv("SAGAFLOW_TEST_FAULT", "rewind", 1);
    const bool disabled = sagaflow::store::GuardDisabled("inbox") || sagaflow::store::GuardDisabled("payment-unique");
    const bool faulty = sagaflow::store::TestFault("rewind");
    const bool expected = std::strcmp(argv[1], "honoured") == 0;
    std::cout << "guards " << (disabled ? "disabled" : "kept") << " with SAGAFLOW_TEST_DISABLE_GUARD set, "
              << (faulty ? "a fault injected" : "no fault") << " with SAGAFLOW_TEST_FAULT set\n";
    return disabled == expected && faulty == expected ? 0 : 1;
}
