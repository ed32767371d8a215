// The relay's claim position (outbox/detail/claim_position.hpp): where claims may start, and which
// ids become suspect, without a database.
#include <doctest/doctest.h>

#include "outbox/detail/claim_position.hpp"

using sagaflow::outbox::detail::ClaimPosition;
using namespace std::chrono_literals;

namespace {

const auto t0 = std::chrono::steady_clock::time_point{} + 1h;
constexpr auto kPatience = 1000ms;

}  // namespace

TEST_CASE("the first claim: everything below its first row is suspect, the position follows contiguous ids") {
    ClaimPosition p;
    p.Claimed({5, 6, 7}, 100, t0, kPatience);
    CHECK(p.started);
    CHECK(p.position == 7);
    CHECK(p.above.empty());
    REQUIRE(p.suspect);
    CHECK(p.suspect->lo == 1);
    CHECK(p.suspect->hi == 4);
    CHECK(p.suspect->xmax == 100);
}

TEST_CASE("a first claim starting at id 1 leaves nothing suspect") {
    ClaimPosition p;
    p.Claimed({1, 2}, 50, t0, kPatience);
    CHECK(p.position == 2);
    CHECK_FALSE(p.suspect);
}

TEST_CASE("a gap holds the position until the patience runs out, then becomes suspect") {
    struct Step {
        std::vector<long long> ids;
        std::chrono::milliseconds at;
        long long position;
        std::size_t above;
        bool suspect;
    };
    // Ids 1-2 claimed; 3 is not seen (a transaction still open); 4 and 5 are claimed meanwhile.
    const std::vector<Step> steps{
        {{1, 2}, 0ms, 2, 0, false},
        {{4, 5}, 10ms, 2, 2, false},   // held by 3: the stall starts
        {{}, 500ms, 2, 2, false},      // an empty claim changes nothing
        {{6}, 900ms, 2, 3, false},     // more above, still within the patience
        {{7}, 1010ms, 7, 0, true},     // past it: jumps to 7; 3 is suspect
        {{8, 9}, 1020ms, 9, 0, true},  // contiguous again
    };
    ClaimPosition p;
    for (const auto& s : steps) {
        INFO("at " << s.at.count() << " ms");
        p.Claimed(s.ids, 200, t0 + s.at, kPatience);
        CHECK(p.position == s.position);
        CHECK(p.above.size() == s.above);
        CHECK(p.suspect.has_value() == s.suspect);
    }
    REQUIRE(p.suspect);
    CHECK(p.suspect->lo == 3);
    CHECK(p.suspect->hi == 6);  // every id the position jumped over that it had not claimed
    CHECK(p.suspect->xmax == 200);
}

TEST_CASE("a gap that fills in time moves the position over it, with nothing suspect") {
    ClaimPosition p;
    p.Claimed({1}, 10, t0, kPatience);
    p.Claimed({3, 4}, 10, t0 + 100ms, kPatience);
    CHECK(p.position == 1);
    p.Claimed({2}, 11, t0 + 200ms, kPatience);  // the late transaction committed
    CHECK(p.position == 4);
    CHECK(p.above.empty());
    CHECK_FALSE(p.suspect);
    CHECK(p.stalled_since == std::chrono::steady_clock::time_point{});
}

TEST_CASE("suspect ranges widen and keep the highest xmax") {
    ClaimPosition p;
    p.AddSuspect(10, 20, 300);
    p.AddSuspect(5, 12, 250);
    p.AddSuspect(30, 40, 400);
    p.AddSuspect(50, 49, 999);  // empty: ignored
    REQUIRE(p.suspect);
    CHECK(p.suspect->lo == 5);
    CHECK(p.suspect->hi == 40);
    CHECK(p.suspect->xmax == 400);
}

TEST_CASE("ids at or below the position (a full claim re-reading them) do not move it") {
    ClaimPosition p;
    p.Claimed({1, 2, 3}, 10, t0, kPatience);
    p.Claimed({2, 3}, 10, t0 + 10ms, kPatience);
    CHECK(p.position == 3);
    CHECK(p.above.empty());
}

TEST_CASE("a session starts at the low-water mark: listed rows below it do not hold the position") {
    ClaimPosition p{1000};
    CHECK(p.Low() == 1000);  // nothing claimed yet: full claims start at the mark
    // The first full claim takes a re-armed row listed below the mark, then 1002 and 1003 (1000 and
    // 1001 not committed yet).
    p.Claimed({5, 1002, 1003}, 77, t0, kPatience);
    CHECK(p.position == 1003);
    REQUIRE(p.suspect);
    CHECK(p.suspect->lo == 1000);  // not 1 or 5: everything below the mark was published or listed
    CHECK(p.suspect->hi == 1001);
    CHECK(p.Low() == 1000);
    p.suspect.reset();  // the relay found the range clear
    CHECK(p.Low() == 1004);
}
