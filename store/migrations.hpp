#pragma once
// The schema migration runner. Files `NNN_name.sql` are applied in version order, each in its own
// transaction, and recorded in `sagaflow_migration` with their SHA-256. A session-level advisory
// lock serialises concurrent migrators (several engine instances starting at once): the second
// waits, then finds everything applied.

#include <filesystem>
#include <pqxx/transaction_base>
#include <stdexcept>
#include <string>
#include <vector>

namespace sagaflow::store {

struct Migration {
    int version = 0;
    std::string name;  // file name, e.g. "001_core.sql"
    std::string sql;
};

// An applied migration that differs from the binary's, or an unknown one: the schema cannot be
// trusted, so nothing is applied. The message names the file and a hint.
class MigrationError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// The migrations compiled into this binary from sql/.
const std::vector<Migration>& BuiltinMigrations();

// Reads `NNN_name.sql` files from a folder (for development and tests).
std::vector<Migration> MigrationsFromDir(const std::filesystem::path& dir);

struct MigrateReport {
    std::vector<std::string> applied;          // applied by this call, in order
    std::vector<std::string> already_applied;  // found applied
};

// Connects to `url`, takes the advisory lock, verifies what is applied, applies the rest.
MigrateReport MigrateBlocking(const std::string& url, const std::vector<Migration>& migrations);

// Takes the transaction-scoped advisory lock every sagaflow process holds while it creates schemas
// and runs setup DDL, so N replicas starting at once run theirs one after another: `CREATE ... IF
// NOT EXISTS` is not safe against a concurrent twin (both pass the check, one fails on the catalog's
// unique index), but it is once they are serialised.
void LockSetup(pqxx::transaction_base& tx);

}  // namespace sagaflow::store
