#include "store/errors.hpp"

#include <pqxx/except>

#include <string_view>
#include <utility>

namespace sagaflow::store {
namespace {

struct Cause {
    std::string_view what;  // "the database is out of disk space"
    std::string_view fix;   // "free space on its volume"
};

std::string SqlState(const std::exception& e) {
    if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) return sql->sqlstate();
    return {};
}

const Cause* CauseOf(const std::exception& e) {
    static const Cause kConnection{"the connection to the database broke",
                                   "check that PostgreSQL runs and is reachable"};
    static const Cause kDisk{"the database is out of disk space",
                             "free space on PostgreSQL's volume or grow it (sagaflow prune and sweep delete old "
                             "history)"};
    static const Cause kMemory{"the database is out of memory", "give PostgreSQL more memory or lower its load"};
    static const Cause kConnections{"the database has no free connection slot",
                                    "raise max_connections or lower the pool sizes (db.pool_size)"};
    static const Cause kResources{"the database is out of a resource", "see PostgreSQL's log"};
    static const Cause kShutdown{"the database is shutting down or restarting", "wait for it to come back"};
    static const Cause kIo{"the database failed an I/O operation", "check PostgreSQL's disk and its log"};
    static const Cause kRace{"a transaction lost a serialization or deadlock race", "none needed: it is retried"};
    static const Cause kReadOnly{"the database is read-only (a standby, or after a failover)",
                                 "point db.url at the primary"};
    // libpqxx 6.4 raises these without a SQLSTATE: by their class.
    if (dynamic_cast<const pqxx::too_many_connections*>(&e) != nullptr) return &kConnections;
    if (dynamic_cast<const pqxx::transaction_rollback*>(&e) != nullptr) return &kRace;  // 40001, 40P01, 40003
    if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr ||
        dynamic_cast<const pqxx::in_doubt_error*>(&e) != nullptr) {
        return &kConnection;  // in doubt: the inbox drops the work if it did commit
    }
    const std::string state = SqlState(e);
    if (state.size() != 5) return nullptr;
    const std::string_view cls = std::string_view(state).substr(0, 2);
    if (cls == "08") return &kConnection;
    if (state == "53100") return &kDisk;
    if (state == "53200") return &kMemory;
    if (state == "53300") return &kConnections;
    if (cls == "53") return &kResources;
    if (state == "57P01" || state == "57P02" || state == "57P03") return &kShutdown;
    if (cls == "58") return &kIo;
    if (cls == "40") return &kRace;
    if (state == "25006") return &kReadOnly;
    return nullptr;
}

}  // namespace

std::string ServerMessage(std::string text) {
    if (const auto end = text.find('\n'); end != std::string::npos) text.resize(end);
    if (text.rfind("ERROR:", 0) == 0) text.erase(0, text.find_first_not_of(' ', 6));
    return text;
}

bool IsTransientDatabaseError(const std::exception& e) {
    return CauseOf(e) != nullptr;
}

std::string ExplainDatabaseError(const std::exception& e) {
    const Cause* cause = CauseOf(e);
    if (cause == nullptr) return e.what();
    const std::string state = SqlState(e);
    return std::string(cause->what) + " (" + (state.empty() ? "" : "SQLSTATE " + state + ": ") +
           ServerMessage(e.what()) + "): " + std::string(cause->fix) +
           "; the work waits and is retried, nothing is lost";
}

std::string TransientCause(const std::exception& e) {
    const Cause* cause = CauseOf(e);
    return cause == nullptr ? std::string() : std::string(cause->what);
}

std::optional<std::uint64_t> FailureLogLimit::Due(std::chrono::steady_clock::time_point now) {
    // A failure after a spell without any (longer than the interval) starts a new episode.
    const bool quiet_before = !last_logged_ || now - last_failure_ > every_;
    last_failure_ = now;
    if (quiet_before || now - *last_logged_ >= every_) {
        last_logged_ = now;
        return std::exchange(suppressed_, 0);
    }
    ++suppressed_;
    return std::nullopt;
}

}  // namespace sagaflow::store
