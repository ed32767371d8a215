#include "engine/repository/retention.hpp"

#include "engine/repository/saga_store.hpp"

#include <pqxx/pqxx>
#include <stdexcept>
#include <vector>

namespace sagaflow {

namespace {

std::vector<std::string> FinishedStatuses(const PruneOptions& options) {
    std::vector<std::string> statuses{"completed", "compensated"};
    if (options.include_failed) statuses.emplace_back("failed");
    return statuses;
}

}  // namespace

void ValidatePruneOptions(const PruneOptions& options) {
    if (options.older_than < kMinHistoryRetention) {
        throw std::invalid_argument(
            "a horizon of " + std::to_string(options.older_than.count()) +
            " h is refused: it must be at least 72 h (3 days), longer than every deduplication TTL, so that no "
            "idempotency record, inbox entry or resend still names a deleted saga. Hint: keep at least 3 days");
    }
    if (options.batch_size < 1) throw std::invalid_argument("the batch size must be at least 1");
}

std::string Describe(const PruneReport& report, const PruneOptions& options) {
    const long long hours = options.older_than.count();
    const std::string horizon = hours % 24 == 0 ? std::to_string(hours / 24) + " days" : std::to_string(hours) + " h";
    return std::string(options.dry_run ? "would delete " : "deleted ") + std::to_string(report.sagas) + " sagas (" +
           std::to_string(report.steps) + " step rows, " + std::to_string(report.events) +
           " timeline entries) that ended over " + horizon + " ago" +
           (options.include_failed ? ", failed ones included" : " (failed sagas kept: --include-failed)") + ", and " +
           std::to_string(report.orphan_events) + " timeline entries of no saga as old";
}

PruneReport PruneHistory(pqxx::connection& conn,
                         const PruneOptions& options,
                         const std::function<void(const PruneReport&)>& progress) {
    ValidatePruneOptions(options);
    PruneReport report;
    std::string cutoff;
    std::vector<std::string> types;
    {
        pqxx::read_transaction tx{conn};
        cutoff = tx.exec_params1("SELECT (now() - make_interval(hours => $1))::text",
                                 static_cast<int>(options.older_than.count()))[0]
                     .as<std::string>();
        for (const auto& row : tx.exec("SELECT DISTINCT saga_type FROM saga_definition ORDER BY 1")) {
            types.push_back(row[0].as<std::string>());
        }
    }
    const auto statuses = FinishedStatuses(options);
    if (options.dry_run) {
        pqxx::read_transaction tx{conn};
        std::string in_list;
        for (const auto& status : statuses) in_list += (in_list.empty() ? "" : ", ") + tx.quote(status);
        const auto row = tx.exec_params1(
            "WITH v AS (SELECT saga_id FROM saga_instance WHERE status IN (" + in_list +
                ") AND updated_at < $1::timestamptz) SELECT (SELECT count(*) FROM v), (SELECT count(*) FROM "
                "saga_step s JOIN v USING (saga_id)), (SELECT count(*) FROM saga_timeline e JOIN v USING (saga_id)), "
                "(SELECT count(*) FROM saga_event WHERE saga_id IS NULL AND at < $1::timestamptz)",
            cutoff);
        report.sagas = row[0].as<long long>();
        report.steps = row[1].as<long long>();
        report.events = row[2].as<long long>();
        report.orphan_events = row[3].as<long long>();
        return report;
    }
    // Per (type, status): a range of the (saga_type, status, created_at) index (a saga that ended
    // before the cutoff was created before it). The timeline and the steps go in the same
    // statement as their saga (no foreign key cascades since 013), counted: steps by row, the
    // timeline by entry (a row holds its `later` entries too).
    const std::string sql =
        "WITH victims AS (SELECT saga_id FROM saga_instance WHERE saga_type = $1 AND status = $2 AND created_at < "
        "$3::timestamptz AND updated_at < $3::timestamptz AND pg_try_advisory_xact_lock(" +
        std::string(detail::kSagaLockKeySql) +
        ") ORDER BY created_at LIMIT $4 FOR UPDATE SKIP LOCKED), "
        "events AS (DELETE FROM saga_event e USING victims v WHERE e.saga_id = v.saga_id "
        "RETURNING 1 + coalesce(jsonb_array_length(e.later), 0) AS entries), "
        "steps AS (DELETE FROM saga_step s USING victims v WHERE s.saga_id = v.saga_id RETURNING 1), "
        "sagas AS (DELETE FROM saga_instance i USING victims v WHERE i.saga_id = v.saga_id RETURNING 1) "
        "SELECT (SELECT count(*) FROM sagas), (SELECT count(*) FROM steps), (SELECT coalesce(sum(entries), 0) FROM "
        "events)";
    for (const auto& type : types) {
        for (const auto& status : statuses) {
            for (;;) {
                pqxx::work tx{conn};
                const auto row = tx.exec_params1(sql, type, status, cutoff, options.batch_size);
                tx.commit();
                const auto sagas = row[0].as<long long>();
                report.sagas += sagas;
                report.steps += row[1].as<long long>();
                report.events += row[2].as<long long>();
                if (sagas > 0 && progress) progress(report);
                if (sagas < options.batch_size) break;
            }
        }
    }
    // Entries of no saga (replies that named none): on the timeline index's NULL end.
    for (;;) {
        pqxx::work tx{conn};
        const auto result = tx.exec_params(
            "DELETE FROM saga_event WHERE ctid = ANY(ARRAY(SELECT ctid FROM saga_event WHERE saga_id IS NULL AND at < "
            "$1::timestamptz LIMIT $2))",
            cutoff,
            options.batch_size);
        tx.commit();
        report.orphan_events += static_cast<long long>(result.affected_rows());
        if (result.affected_rows() < static_cast<std::size_t>(options.batch_size)) break;
    }
    return report;
}

}  // namespace sagaflow
