#include "outbox/detail/claim_position.hpp"

#include <algorithm>

namespace sagaflow::outbox::detail {

void ClaimPosition::AddSuspect(long long lo, long long hi, std::uint64_t xmax) {
    if (lo > hi) return;
    if (!suspect) {
        suspect = SuspectRange{lo, hi, xmax};
        return;
    }
    suspect->lo = std::min(suspect->lo, lo);
    suspect->hi = std::max(suspect->hi, hi);
    suspect->xmax = std::max(suspect->xmax, xmax);
}

long long ClaimPosition::Low() const {
    if (!started) return floor;
    return suspect ? std::min(suspect->lo, position + 1) : position + 1;
}

void ClaimPosition::Claimed(const std::vector<long long>& ids,
                            std::uint64_t xmax,
                            std::chrono::steady_clock::time_point now,
                            std::chrono::milliseconds patience) {
    for (const long long id : ids) {
        if (id > position && id >= floor) above.insert(id);  // a lower one is a listed row
    }
    if (above.empty()) return;
    if (!started) {  // the session's first claim: below its first row, rows may still commit
        position = *above.begin() - 1;
        AddSuspect(floor, position, xmax);
        started = true;
    }
    bool moved = false;
    while (!above.empty() && *above.begin() == position + 1) {
        ++position;
        above.erase(above.begin());
        moved = true;
    }
    if (above.empty() || moved) {
        stalled_since = above.empty() ? std::chrono::steady_clock::time_point{} : now;
        return;
    }
    if (stalled_since == std::chrono::steady_clock::time_point{}) {
        stalled_since = now;
    } else if (now - stalled_since >= patience) {
        AddSuspect(position + 1, *above.rbegin() - 1, xmax);
        position = *above.rbegin();
        above.clear();
        stalled_since = {};
    }
}

}  // namespace sagaflow::outbox::detail
