#include "store/transaction.hpp"

#include <cstring>
#include <pqxx/errorhandler>
#include <pqxx/except>
#include <stdexcept>
#include <vector>

#include "store/prepared.hpp"

namespace sagaflow::store {

namespace {

// Swallows PostgreSQL's warning that a ROLLBACK found no transaction: after a COMMIT that failed
// (a deferred constraint, a serialization failure) the block is closed already, and the ROLLBACK
// that follows, sent because the failure might have been the statement before the COMMIT, is no
// news. Any other notice passes on to the connection's older handlers.
class QuietNoTransaction final : public pqxx::errorhandler {
  public:
    using pqxx::errorhandler::errorhandler;
    bool operator()(const char message[]) noexcept override {
        return std::strstr(message, "there is no transaction in progress") == nullptr;
    }
};

// libpqxx 6.4 reconnects a lost connection at the next statement unless told not to. Inside a
// block it opened itself (pqxx::work) it never does; a block opened in plain SQL needs the switch,
// or a statement after a lost connection would run on a new session, outside any transaction.
// The switch stays on for the connection's life: whoever owns it reconnects for itself (the pool
// replaces a connection that is no longer open).
pqxx::connection_base& WithoutReactivation(pqxx::connection_base& conn) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    conn.inhibit_reactivation(true);
#pragma GCC diagnostic pop
    return conn;
}

}  // namespace

std::string ExecuteQuery(pqxx::connection_base& conn, const Statement& statement) {
    std::vector<const char*> params;
    params.reserve(statement.params.size());
    for (const auto& param : statement.params) params.push_back(param.c_str());
    return ExecuteByName(conn, PreparedName(conn, statement.sql), params);
}

std::string BeginWith(pqxx::connection_base& conn, const Statement& first) {
    return "BEGIN; " + ExecuteQuery(conn, first);
}

Transaction::Transaction(pqxx::connection_base& conn, const std::optional<Statement>& first)
    : work_{WithoutReactivation(conn)} {
    try {
        first_ = work_.exec(first ? BeginWith(conn, *first) : std::string("BEGIN"));
        open_ = true;
    } catch (...) {
        RollBack();  // the BEGIN ran if the statement after it failed: the block is open and aborted
        throw;
    }
}

Transaction::~Transaction() {
    if (open_) RollBack();
}

void Transaction::Commit(const std::optional<Statement>& last) {
    if (!open_) throw std::logic_error("the transaction is not open");
    const std::string query = last ? ExecuteQuery(work_.conn(), *last) + "; COMMIT" : std::string("COMMIT");
    open_ = false;
    try {
        work_.exec0(query);
    } catch (const pqxx::broken_connection& e) {
        throw pqxx::in_doubt_error(std::string("the connection was lost while committing: ") + e.what());
    } catch (...) {
        // The last statement failed (the block is open and aborted), or the COMMIT did (it is closed).
        if (last) RollBack();
        throw;
    }
    work_.commit();
}

void Transaction::RollBack() noexcept {
    try {
        if (!work_.conn().is_open()) return;
        const QuietNoTransaction quiet{work_.conn()};
        work_.exec0("ROLLBACK");
    } catch (...) {  // NOLINT(bugprone-empty-catch): the failure that led here is the one to report
    }
}

}  // namespace sagaflow::store
