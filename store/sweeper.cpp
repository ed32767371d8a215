#include "store/sweeper.hpp"

#include <spdlog/spdlog.h>

#include <pqxx/pqxx>
#include <stdexcept>

#include "store/named_thread.hpp"

namespace sagaflow::store {

std::chrono::hours ValidateTtl(std::chrono::hours ttl) {
    if (ttl < kMinTtl || ttl > kMaxTtl) {
        throw std::invalid_argument(
            "a TTL of " + std::to_string(ttl.count()) +
            " h is refused: it must lie in 24-72 h (rule R-DIST-IDEM-5). Shorter, and a client's real retry after "
            "an outage is no longer deduplicated and money can move twice; longer, and the tables grow for nothing. "
            "Hint: choose a value from 24 to 72 hours");
    }
    return ttl;
}

namespace {

// Deletes the rows matching `condition` in transactions of at most `batch_size` rows (ctid
// batches), so each holds its locks briefly.
long long DeleteInBatches(pqxx::connection& conn,
                          const std::string& table,
                          const std::string& condition,
                          int batch_size) {
    const std::string sql = "DELETE FROM " + table + " WHERE ctid = ANY(ARRAY(SELECT ctid FROM " + table + " WHERE " +
                            condition + " LIMIT $1))";
    long long total = 0;
    for (;;) {
        pqxx::work tx{conn};
        const auto result = tx.exec_params(sql, batch_size);
        tx.commit();
        total += static_cast<long long>(result.affected_rows());
        if (result.affected_rows() < static_cast<std::size_t>(batch_size)) return total;
    }
}

// Published outbox rows past the TTL: the inboxes have forgotten their event ids by then, so a copy
// kept longer deduplicates nothing. Kept while the step phase they command is open or ended within
// the TTL: a resend re-arms the very row (same id, same bytes), and the audit expects a recent step's
// row. Unpublished rows are never deleted. No index names `published_at` (the relay's mark must stay
// a HOT update), so this walks the primary key from the oldest row in windows of `batch_size` ids,
// one transaction each, and stops at the first window with no row created before the cutoff (rows
// are created in id order, give or take the commit order of concurrent writers).
long long DeleteOutboxRows(pqxx::connection& conn, const std::string& cutoff, int batch_size) {
    long long total = 0;
    long long after = 0;
    for (;;) {
        pqxx::work tx{conn};
        const auto window = tx.exec_params1("SELECT max(id), coalesce(bool_or(created_at < " + cutoff +
                                                "), false) FROM (SELECT id, created_at FROM outbox WHERE id > $1 "
                                                "ORDER BY id LIMIT $2) w",
                                            after,
                                            batch_size);
        if (window[0].is_null()) return total;
        const auto last = window[0].as<long long>();
        total += static_cast<long long>(
            tx.exec_params(
                  "DELETE FROM outbox WHERE id > $1 AND id <= $2 AND published_at < " + cutoff +
                      // The command's step phase, by its primary key (the CASE keeps a key
                      // that is no saga id away from the cast).
                      " AND NOT EXISTS (SELECT 1 FROM saga_step s WHERE s.saga_id = CASE WHEN "
                      "outbox.message_key ~ '^[0-9a-fA-F-]{36}$' THEN outbox.message_key::uuid END AND "
                      "s.step_name = outbox.payload->>'stepname' AND s.phase = outbox.payload->>'phase' AND "
                      "s.command_event_id = outbox.event_id AND (s.completed_at IS NULL OR s.completed_at >= " +
                      cutoff + "))",
                  after,
                  last)
                .affected_rows());
        tx.commit();
        if (!window[1].as<bool>()) return total;
        after = last;
    }
}

}  // namespace

std::string Describe(const SweepReport& report, std::chrono::hours ttl) {
    return "deleted " + std::to_string(report.processed_events) + " processed_event, " +
           std::to_string(report.idempotency_records) + " idempotency_record and " +
           std::to_string(report.outbox_rows) + " published outbox rows older than " + std::to_string(ttl.count()) +
           " h";
}

SweepReport SweepOnce(pqxx::connection& conn, std::chrono::hours ttl, int batch_size) {
    ValidateTtl(ttl);
    SweepReport report;
    // The TTL is a validated integer, so it goes into the statements as text.
    const std::string cutoff = "now() - interval '" + std::to_string(ttl.count()) + " hours'";
    report.processed_events = DeleteInBatches(conn, "processed_event", "processed_at < " + cutoff, batch_size);
    // Idempotency records carry their own expiry, set from the TTL when they were written.
    report.idempotency_records = DeleteInBatches(conn, "idempotency_record", "expires_at < now()", batch_size);
    report.outbox_rows = DeleteOutboxRows(conn, cutoff, batch_size);
    return report;
}

Sweeper::Sweeper(ConnectionPool& pool, std::chrono::hours ttl, std::chrono::milliseconds interval, Extra extra)
    : pool_(pool), ttl_(ValidateTtl(ttl)), interval_(interval), extra_(std::move(extra)) {}

Sweeper::~Sweeper() {
    Stop();
}

SweepReport Sweeper::SweepNowBlocking() {
    return pool_.RunBlocking([ttl = ttl_](pqxx::connection& conn) { return SweepOnce(conn, ttl); });
}

void Sweeper::Start() {
    thread_ = NamedThread("sf-sweeper", [this] {
        std::unique_lock lock{mutex_};
        while (!stopping_) {
            lock.unlock();
            try {
                const auto report = SweepNowBlocking();
                spdlog::info("sweeper: {}", Describe(report, ttl_));
                if (extra_) spdlog::info("sweeper: {}", pool_.RunBlocking(extra_));
            } catch (const std::exception& e) {
                spdlog::warn("sweeper: pass failed, retrying at the next interval: {}", e.what());
            }
            lock.lock();
            wake_.wait_for(lock, interval_, [this] { return stopping_; });
        }
    });
}

void Sweeper::Stop() {
    {
        std::lock_guard lock{mutex_};
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
}

}  // namespace sagaflow::store
