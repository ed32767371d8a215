#pragma once
// A read-committed transaction whose BEGIN travels with its first statement: one simple query
// `BEGIN; EXECUTE <prepared statement>(<parameters as literals>)` opens it and runs that statement,
// one round trip where pqxx::work takes two (its constructor sends BEGIN alone, and libpqxx 6.4
// cannot pipeline). The statement is prepared by name as store::Exec prepares it (the first use on
// a connection prepares it, in a round trip of its own, once), so PostgreSQL plans it once per
// connection either way.
//
// The transaction exists only once its BEGIN went out: no statement can run on the connection
// between construction and the transaction's start. Statements after the first run through
// `Work()` like any other (store::Exec, exec_params, savepoints in plain SQL), inside the block.
//
// Lifecycle: constructed (BEGIN and the first statement ran; a failure of either throws what
// pqxx::work would, and the block is rolled back) -> statements -> Commit(), optionally with the
// transaction's last write in the same round trip, or destruction, which rolls back. The connection never reconnects
// silently: its reactivation is inhibited from the first Transaction on, for its whole life (its owner reconnects,
// as store::ConnectionPool does). A lost connection throws pqxx::broken_connection from the statement that found it,
// and from Commit() pqxx::in_doubt_error, as pqxx::work's commit does.

#include <optional>
#include <pqxx/connection_base>
#include <pqxx/nontransaction>
#include <pqxx/result>
#include <string>
#include <vector>

namespace sagaflow::store {

// A statement with its parameters in their text form (none NULL), as ExecTexts takes them.
struct Statement {
    std::string sql;
    std::vector<std::string> params;
};

class Transaction {
  public:
    // Opens the transaction with `first` (nullopt: a bare BEGIN) in one round trip.
    Transaction(pqxx::connection_base& conn, const std::optional<Statement>& first);
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;

    // The transaction, for the statements after the first.
    pqxx::transaction_base& Work() noexcept { return work_; }
    // The first statement's rows (empty for a bare BEGIN).
    const pqxx::result& First() const noexcept { return first_; }
    // Moves the first statement's rows out.
    pqxx::result TakeFirst() noexcept { return std::move(first_); }
    // COMMIT; with `last`, that statement first, in the same simple query (`EXECUTE …; COMMIT`): one
    // round trip for a transaction's last write and its commit. Its rows are not returned. A failure
    // of either rolls the block back before the error reaches the caller.
    void Commit(const std::optional<Statement>& last = std::nullopt);

  private:
    void RollBack() noexcept;

    pqxx::nontransaction work_;
    pqxx::result first_;
    bool open_ = false;
};

// `EXECUTE name('…', …)`: the statement prepared by name on `conn` (declared and prepared there if it
// was not), its parameters as literals. BeginWith: the simple query that opens a Transaction with
// `first`, `BEGIN; EXECUTE …`. Public for their test.
std::string ExecuteQuery(pqxx::connection_base& conn, const Statement& statement);
std::string BeginWith(pqxx::connection_base& conn, const Statement& first);

}  // namespace sagaflow::store
