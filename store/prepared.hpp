#pragma once
// Prepared statements without the bookkeeping: Exec(tx, sql, params...) declares `sql` as a
// prepared statement of the transaction's connection the first time that connection sees it, and
// runs it by name from then on. PostgreSQL parses, analyses and plans it once per connection
// instead of on every call: on the saga hot path that work was about a third of PostgreSQL's CPU
// (measured with perf; see bench/README.md).
//
// For statements that find rows by key (the hot path). Scans whose best plan depends on the
// parameters (timer scans, listings) keep exec_params: a cached generic plan could be the wrong one.

#include <optional>
#include <pqxx/connection_base>
#include <pqxx/result>
#include <pqxx/transaction_base>
#include <string>
#include <utility>
#include <vector>

namespace sagaflow::store {

// The statement's name on `conn` ("sf_" and a hash of the text), declared there if it was not.
std::string PreparedName(pqxx::connection_base& conn, const std::string& sql);

// For a session that runs only sagaflow's own statements (the engine's pool, a relay): every one
// of them finds rows through an index, so the session keeps its plans there and plans each
// prepared statement once.
//  - `enable_seqscan = off`: a generic plan made while a table was small (a new deployment, no
//    statistics yet) chose sequential scans and kept them as the table grew (measured: the
//    engine's step read at 1.8 ms a call instead of 0.1, the relay's mark up to 1.5 ms).
//  - `plan_cache_mode = force_generic_plan`: PostgreSQL's default re-plans a prepared statement on
//    every call when its generic plan looks dearer than a custom one, which it always does for an
//    array parameter (`= ANY($1)`, `unnest($1)`: a generic plan assumes 10 elements, the batch has
//    1-3). Measured with perf on the saga benchmark: planning was 7 % of the whole machine.
//  - `jit = off`: a sequential scan left to a statement (a one-row table has no better path) costs
//    10^10 with `enable_seqscan = off`, far above `jit_above_cost`, so PostgreSQL compiled it with
//    LLVM at every call: 80 ms for the relay's one-row low-water update, once a second — measured
//    as a stall of every relay and the open-loop p99 at half load doubling (bench/README.md). No
//    statement of sagaflow's runs long enough for JIT to pay.
// A statement whose best plan depends on its values (an operator's listing by status) sets
// `plan_cache_mode` back for its own transaction (`SET LOCAL`). A participant's sessions use them
// too, for its bookkeeping; its handlers run the user's SQL, after kUserStatementPlans.
void UseOwnStatementPlans(pqxx::connection_base& conn);

// The settings UseOwnStatementPlans changes, back to the session's defaults (a NULL value is `TO
// DEFAULT`) for the rest of the transaction, as SET LOCAL would: the user's SQL in a participant's
// handler and setup plans as the server is configured. As calls, for a statement that carries them
// (InboxFreshIdsWith's `settings`); a rollback to a savepoint taken after them keeps them.
inline constexpr const char* kUserStatementPlansCalls =
    "set_config('enable_seqscan', NULL, true), set_config('plan_cache_mode', NULL, true), "
    "set_config('jit', NULL, true)";
// The same as the prefix of a simple query.
inline const std::string kUserStatementPlans = std::string("SELECT ") + kUserStatementPlansCalls + "; ";

template <typename... Args>
pqxx::result Exec(pqxx::transaction_base& tx, const std::string& sql, Args&&... args) {
    return tx.exec_prepared(PreparedName(tx.conn(), sql), std::forward<Args>(args)...);
}

// Statements whose text is not sagaflow's (a participant's handlers run the user's SQL): prepared
// as Exec does — measured on the saga benchmark: 7-8 % more sagas/s, PostgreSQL's CPU per saga
// -9 % (bench/README.md) — with two differences. At most `limit` distinct texts per connection
// are prepared; the rest run unprepared (such text may vary without bound). And a statement that
// PostgreSQL refuses to run again because its table changed under it ("cached plan must not change
// result type", SQLSTATE 0A000, after an ALTER TABLE) fails that once and is prepared afresh on its
// next use. Plans follow the session's settings (a participant keeps PostgreSQL's defaults).
// `before`: statements of sagaflow's own, as a simple query ending in "; " (a handler's savepoint),
// to run first in the same round trip: the prepared statement then runs as `EXECUTE name(…)` after
// them (ExecuteByName). An unprepared statement takes a round trip of its own after them.
inline constexpr std::size_t kMaxForeignStatements = 256;
pqxx::result ExecForeign(pqxx::transaction_base& tx,
                         const std::string& sql,
                         const std::vector<const char*>& params,
                         std::size_t limit = kMaxForeignStatements,
                         const std::string& before = {});
// `EXECUTE name('…', NULL, …)`: a run of the statement `name`, prepared on `conn` now if it was only
// declared, as a simple query, its parameters as untyped literals (the statement's parameter types
// decide, as for $n; a null pointer is NULL). For a statement to share a round trip with others.
std::string ExecuteByName(pqxx::connection_base& conn, const std::string& name, const std::vector<const char*>& params);
// Drops what ExecForeign knew about a connection: for a pool's on_connect and on_disconnect, so
// the map holds the connections that are alive and nothing of those that came and went.
void ForgetForeignStatements(const pqxx::connection_base& conn);
// How many connections ExecForeign keeps statements for (tests).
std::size_t ForeignStatementConnections();

// The same with parameters built at run time (statements assembled from parts, e.g. a caller's row
// and an outbox row in one statement). An empty string binds as text, not NULL.
pqxx::result ExecTexts(pqxx::transaction_base& tx, const std::string& sql, const std::vector<std::string>& params);

// Array parameters (`$1::uuid[]`, `$1::bigint[]`) as PostgreSQL array literals. UuidArray throws
// std::invalid_argument naming an element that is not a UUID (a checked UUID needs no quoting).
std::string UuidArray(const std::vector<std::string>& ids);
std::string BigintArray(const std::vector<long long>& ids);
// Any texts (`$1::text[]`, cast per element in SQL: `unnest($1::text[])::jsonb`): every element
// quoted, `"` and `\` escaped, nullopt as NULL. Lets one prepared statement write a batch of any
// size (`INSERT ... SELECT FROM unnest(...)`), instead of one statement text per row count.
std::string TextArray(const std::vector<std::optional<std::string>>& values);
// Runs `sql` with one array parameter per column ($1 = columns[0], ...), each built by TextArray.
pqxx::result ExecArrays(pqxx::transaction_base& tx,
                        const std::string& sql,
                        const std::vector<std::vector<std::optional<std::string>>>& columns);

}  // namespace sagaflow::store
