#pragma once
// The relay's claim position (outbox/relay.cpp): pure, unit-tested without a database
// (tests/unit/claim_position_test.cpp).

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

namespace sagaflow::outbox::detail {

// Where the relay's claims start. Under load, a claim that scans the outbox from its first
// unpublished row walks the index entries of every row published since the last vacuum (about
// 1 ms and 500-700 buffers per claim, measured); a claim after the position touches only new rows.
//
// A claim after the position is safe only if no row at or below it can still turn up unclaimed:
// such a row (its transaction committed after the position passed its id, or it was held back
// behind its key) would go out after the later rows of its key. So the position moves over ids
// the relay has claimed, one by one; an id it has not seen (a transaction not committed yet, a
// rolled-back insert) holds it. After `patience` without progress it jumps to the highest id
// claimed, and the ids it jumped over become the suspect range, together with the snapshot's
// xmax: every transaction that can still commit a row in the range has an xid below it (the
// range's ids were taken before the claim that saw a higher id). The session's first claim does
// the same with everything below its first row. While a suspect range exists every claim is a full
// claim (from the low-water mark, in id order: a late row goes out before the later rows
// of its key); the range is cleared once the oldest running transaction is younger than its xmax
// and nothing in it waits unpublished, except rows that hold back their keys by themselves
// (listed in outbox_retry).
struct SuspectRange {
    long long lo = 0;
    long long hi = 0;
    std::uint64_t xmax = 0;
};

struct ClaimPosition {
    // The outbox's low-water mark when the session began (outbox_relay): every lower id is
    // published or listed in outbox_retry, so the position starts below it and ignores those ids.
    long long floor = 1;
    long long position = 0;     // every id up to here was claimed, or is in the suspect range
    std::set<long long> above;  // ids claimed above the position
    std::optional<SuspectRange> suspect;
    std::chrono::steady_clock::time_point stalled_since{};
    bool started = false;

    // Starts a session at `low_water` (outbox_relay.low_water).
    explicit ClaimPosition(long long low_water = 1) : floor(low_water), position(low_water - 1) {}
    // The lowest id that may still wait unpublished without being listed in outbox_retry: where a
    // full claim starts, and what the relay records as the new low-water mark.
    long long Low() const;
    // Widens the suspect range to [lo, hi] (nothing when lo > hi), with the higher xmax.
    void AddSuspect(long long lo, long long hi, std::uint64_t xmax);
    // `ids`: the rows a claim took; `xmax`: its snapshot's xmax; `patience`: how long a gap below
    // the claimed ids may hold the position before it jumps over it.
    void Claimed(const std::vector<long long>& ids,
                 std::uint64_t xmax,
                 std::chrono::steady_clock::time_point now,
                 std::chrono::milliseconds patience);
};

}  // namespace sagaflow::outbox::detail
