#pragma once
// Saga history retention: deletes finished sagas — their row, step rows and timeline — once they
// ended longer ago than the operator's horizon. The engine never reads a finished saga again; what
// these rows keep is the operator's history, so nothing is deleted unless asked (`sagaflow prune`,
// e.g. from cron). The TTL sweeper (store/sweeper.hpp) is separate: it forgets deduplication
// records, which must go after 24-72 h whatever the operator keeps.

#include <chrono>
#include <functional>
#include <string>

#include <pqxx/connection>

namespace sagaflow {

// The shortest horizon: longer than every deduplication TTL (store::kMaxTtl, 72 h), so no
// idempotency record, inbox entry or resend can still name a deleted saga.
inline constexpr std::chrono::hours kMinHistoryRetention{72};

struct PruneOptions {
    std::chrono::hours older_than{24 * 30};  // sagas that ended (last changed) before now - older_than
    bool include_failed = false;             // failed sagas are parked for an operator: kept unless asked
    bool dry_run = false;                    // count what would go, delete nothing
    int batch_size = 500;                    // sagas per transaction: each holds its locks briefly
};

struct PruneReport {
    long long sagas = 0;
    long long steps = 0;
    long long events = 0;         // the deleted sagas' timeline entries
    long long orphan_events = 0;  // timeline entries of no saga (replies that named none), as old
};

// "deleted N sagas (S step rows, E timeline entries) that ended over D days ago ...", or "would
// delete ..." for a dry run: what `sagaflow prune` prints.
std::string Describe(const PruneReport& report, const PruneOptions& options);

// Throws std::invalid_argument naming the limit when options.older_than < kMinHistoryRetention
// or batch_size < 1 (the caller prefixes its setting's name).
void ValidatePruneOptions(const PruneOptions& options);

// One pass over the engine's tables on `conn` (its schema's): finished sagas (completed,
// compensated; failed too with include_failed) whose last change is older than the horizon, in
// batches, each its own transaction; `progress` (optional) gets the running totals after each.
// Sagas another transaction holds are skipped (the next pass takes them).
PruneReport PruneHistory(pqxx::connection& conn,
                         const PruneOptions& options,
                         const std::function<void(const PruneReport&)>& progress = {});

}  // namespace sagaflow
