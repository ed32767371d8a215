// The saga listing's id range (prefix and ages as saga id bounds) and the overview's rates, without
// a database.
#include <doctest/doctest.h>

#include "engine/http/rate_window.hpp"
#include "engine/repository/saga_store.hpp"

using sagaflow::ListQuery;
using sagaflow::detail::ListIdRange;
using sagaflow::detail::RateWindow;

TEST_CASE("an id prefix and ages become inclusive saga id bounds") {
    const auto now = std::chrono::system_clock::time_point(std::chrono::milliseconds(0x0190a5b27c3e));
    ListQuery query;
    auto range = ListIdRange(query, now);
    REQUIRE(range);
    CHECK(range->low.empty());
    CHECK(range->high.empty());

    query.id_prefix = "0190A5B2-7c";  // hyphens ignored, either case
    range = ListIdRange(query, now);
    REQUIRE(range);
    CHECK(range->low == "0190a5b2-7c00-0000-0000-000000000000");
    CHECK(range->high == "0190a5b2-7cff-ffff-ffff-ffffffffffff");

    query.id_prefix = "0190a5b2-7c3e-7def-8a12-3456789abcde";  // a whole id: itself
    range = ListIdRange(query, now);
    REQUIRE(range);
    CHECK(range->low == query.id_prefix);
    CHECK(range->high == query.id_prefix);

    for (const char* bad : {"xyz", "-", "0190a5b2-7c3e-7def-8a12-3456789abcdef", "01 90"}) {
        query.id_prefix = bad;
        CHECK_MESSAGE(!ListIdRange(query, now), bad);
    }

    // Ages: the UUID v7 time of the bound's millisecond.
    query.id_prefix.clear();
    query.min_age = std::chrono::seconds(1);  // created at least a second ago
    range = ListIdRange(query, now);
    REQUIRE(range);
    CHECK(range->low.empty());
    CHECK(range->high == "0190a5b2-7856-ffff-ffff-ffffffffffff");  // 0x7c3e - 1000 = 0x7856
    query.max_age = std::chrono::seconds(2);                       // and at most two
    range = ListIdRange(query, now);
    REQUIRE(range);
    CHECK(range->low == "0190a5b2-746e-0000-0000-000000000000");
    // Both narrow a prefix: the tighter bound wins on each side.
    query.id_prefix = "0190a5b2-75";
    range = ListIdRange(query, now);
    REQUIRE(range);
    CHECK(range->low == "0190a5b2-7500-0000-0000-000000000000");
    CHECK(range->high == "0190a5b2-75ff-ffff-ffff-ffffffffffff");
}

TEST_CASE("rates per minute come from samples at least ten seconds apart, over the last minute") {
    RateWindow window;
    const auto t0 = RateWindow::Clock::time_point{} + std::chrono::hours(1);
    using std::chrono::seconds;
    CHECK(!window.Sample(t0, 100, 10).first);  // one sample: no rate yet
    CHECK(!window.Sample(t0 + seconds(5), 150, 20).first);
    auto rates = window.Sample(t0 + seconds(12), 220, 34);  // 120 and 24 in 12 s
    REQUIRE(rates.first);
    CHECK(*rates.first == doctest::Approx(600));
    CHECK(*rates.second == doctest::Approx(120));
    // Samples every 10 s for two minutes at 2 starts per second: the rate is the last minute's.
    std::uint64_t started = 220;
    for (int s = 20; s <= 140; s += 10) {
        started += 20;
        rates = window.Sample(t0 + seconds(s), started, 34);
    }
    REQUIRE(rates.first);
    CHECK(*rates.first == doctest::Approx(120).epsilon(0.2));
    CHECK(*rates.second == doctest::Approx(0));
}
