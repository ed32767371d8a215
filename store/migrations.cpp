#include "store/migrations.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <pqxx/pqxx>

#include "core/sha256.hpp"
#include "core/text_scan.hpp"
#include "store/pool.hpp"

namespace sagaflow::store {
namespace {

// "sagaflow" in ASCII: the advisory lock every sagaflow migrator takes.
constexpr long long kMigrationLock = 0x736167616677;
// "sagasetup" folded into 63 bits: the lock of LockSetup.
constexpr long long kSetupLock = 0x7361676173657475;

void CheckSequence(const std::vector<Migration>& migrations) {
    for (std::size_t i = 1; i < migrations.size(); ++i) {
        if (migrations[i].version == migrations[i - 1].version) {
            throw MigrationError("two migrations have version " + std::to_string(migrations[i].version) + ": " +
                                 migrations[i - 1].name + " and " + migrations[i].name +
                                 ". Hint: give each file its own NNN prefix");
        }
    }
}

}  // namespace

std::vector<Migration> MigrationsFromDir(const std::filesystem::path& dir) {
    // NNN_lowercase_words.sql
    const auto migration_name = [](const std::string& name) {
        const auto stem = std::string_view(name).substr(0, name.size() < 4 ? 0 : name.size() - 4);
        return name.size() > 8 && name.compare(name.size() - 4, 4, ".sql") == 0 &&
               text::IsDigits(stem.substr(0, 3), 3) && stem[3] == '_' &&
               std::all_of(stem.begin() + 4, stem.end(), [](char c) {
                   return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
               });
    };
    std::vector<Migration> out;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        if (!entry.is_regular_file() || !migration_name(name)) continue;
        std::ifstream in(entry.path(), std::ios::binary);
        std::string sql((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        out.push_back({std::stoi(name.substr(0, 3)), name, std::move(sql)});
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.version < b.version; });
    CheckSequence(out);
    return out;
}

namespace {

// A URL whose search_path names a schema that does not exist yet (a participant's, e.g.
// options=-csearch_path%3Dpayments) gets it created, as Participant::Start does; without a schema
// PostgreSQL's own error ("no schema has been selected to create in") names no fix.
void CreateSearchPathSchema(pqxx::work& tx) {
    const auto row = tx.exec1("SELECT current_schema() IS NULL, current_setting('search_path')");
    if (!row[0].as<bool>()) return;
    const std::string path = row[1].as<std::string>();
    std::string first = path.substr(0, path.find(','));
    first.erase(0, first.find_first_not_of(" \""));
    first.erase(first.find_last_not_of(" \"") + 1);
    if (!text::IsSqlName(first)) {
        throw MigrationError("the connection's search_path (" + path +
                             ") names no schema that exists. Hint: create the schema first, or name a plain "
                             "lowercase one in the URL (options=-csearch_path%3Dpayments) for migrate to create");
    }
    tx.exec("CREATE SCHEMA IF NOT EXISTS " + tx.quote_name(first));
}

}  // namespace

MigrateReport MigrateBlocking(const std::string& url, const std::vector<Migration>& migrations) {
    CheckSequence(migrations);
    auto conn = ConnectOnce(url);
    MigrateReport report;
    {
        pqxx::nontransaction tx{*conn};
        tx.exec("SELECT pg_advisory_lock(" + std::to_string(kMigrationLock) + ")");
    }
    try {
        {
            pqxx::work tx{*conn};
            CreateSearchPathSchema(tx);
            tx.exec(
                "CREATE TABLE IF NOT EXISTS sagaflow_migration ("
                "version int PRIMARY KEY, name text NOT NULL, checksum text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now())");
            tx.commit();
        }
        std::map<int, std::pair<std::string, std::string>> applied;  // version -> (name, checksum)
        {
            pqxx::read_transaction tx{*conn};
            for (const auto& row : tx.exec("SELECT version, name, checksum FROM sagaflow_migration")) {
                applied[row[0].as<int>()] = {row[1].as<std::string>(), row[2].as<std::string>()};
            }
        }
        for (const auto& [version, entry] : applied) {
            const auto it = std::find_if(
                migrations.begin(), migrations.end(), [v = version](const auto& m) { return m.version == v; });
            if (it == migrations.end()) {
                throw MigrationError("the database has migration " + entry.first +
                                     " that this sagaflow does not know: a newer version migrated it. Hint: run "
                                     "the sagaflow version that applied it, or a newer one");
            }
            const std::string checksum = Sha256Hex(it->sql);
            if (checksum != entry.second) {
                throw MigrationError("migration " + it->name + " was changed after it was applied (checksum " +
                                     entry.second.substr(0, 12) + " in the database, " + checksum.substr(0, 12) +
                                     " now). Hint: never edit an applied migration; restore it and add a new "
                                     "NNN_name.sql file with the change");
            }
            report.already_applied.push_back(it->name);
        }
        for (const auto& migration : migrations) {
            if (applied.count(migration.version) != 0) continue;
            pqxx::work tx{*conn};
            try {
                tx.exec(migration.sql);
            } catch (const pqxx::sql_error& e) {
                throw MigrationError("migration " + migration.name + " failed and was rolled back: " + e.what());
            }
            tx.exec_params("INSERT INTO sagaflow_migration (version, name, checksum) VALUES ($1, $2, $3)",
                           migration.version,
                           migration.name,
                           Sha256Hex(migration.sql));
            tx.commit();
            report.applied.push_back(migration.name);
        }
    } catch (...) {
        try {
            pqxx::nontransaction tx{*conn};
            tx.exec("SELECT pg_advisory_unlock(" + std::to_string(kMigrationLock) + ")");
        } catch (...) {  // the session ends with the connection, and the lock with it
        }
        throw;
    }
    pqxx::nontransaction tx{*conn};
    tx.exec("SELECT pg_advisory_unlock(" + std::to_string(kMigrationLock) + ")");
    return report;
}

void LockSetup(pqxx::transaction_base& tx) {
    tx.exec("SELECT pg_advisory_xact_lock(" + std::to_string(kSetupLock) + ")");
}

}  // namespace sagaflow::store
