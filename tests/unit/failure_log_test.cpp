// How often a failure that a loop retries every second is logged while the database is away.
#include <doctest/doctest.h>

#include "store/errors.hpp"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST_CASE("a repeating failure is logged at once, then once per interval with the count it held back") {
    sagaflow::store::FailureLogLimit limit{30s};
    const Clock::time_point t0{};
    CHECK(limit.Due(t0 + 100s) == std::optional<std::uint64_t>(0));  // the first failure
    int logged = 0;
    for (int s = 101; s < 130; ++s) logged += limit.Due(t0 + std::chrono::seconds(s)) ? 1 : 0;  // every second
    CHECK(logged == 0);
    CHECK(limit.Due(t0 + 130s) == std::optional<std::uint64_t>(29));  // 30 s on: the 29 held back
    CHECK(!limit.Due(t0 + 131s));
    // Quiet for longer than the interval: the next failure is a new episode, logged at once.
    CHECK(limit.Due(t0 + 200s) == std::optional<std::uint64_t>(1));
    CHECK(!limit.Due(t0 + 201s));
}
