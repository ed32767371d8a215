#include "store/prepared.hpp"

#include <cstdio>
#include <functional>
#include <mutex>
#include <pqxx/except>
#include <pqxx/nontransaction>
#include <pqxx/prepared_statement>
#include <pqxx/transaction_base>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "store/inbox.hpp"

namespace sagaflow::store {

namespace {

// A statement's name on a connection: `prefix` and a hash of its text.
std::string StatementName(const char* prefix, const std::string& sql) {
    char name[32];
    std::snprintf(name, sizeof name, "%s%016zx", prefix, std::hash<std::string>{}(sql));
    return name;
}

}  // namespace

std::string PreparedName(pqxx::connection_base& conn, const std::string& sql) {
    const std::string name = StatementName("sf_", sql);
    // libpqxx keeps the definitions per connection: the same name and text again is a lookup;
    // the statement reaches the server on its first use (and again after a reconnect).
    conn.prepare(name, sql);
    return name;
}

namespace {

// Per connection: the foreign statements prepared on it, and those to prepare afresh.
struct ForeignStatements {
    std::unordered_set<std::string> prepared;
    std::unordered_set<std::string> stale;
};
std::mutex g_foreign_mutex;
std::unordered_map<const pqxx::connection_base*, ForeignStatements> g_foreign;

}  // namespace

pqxx::result ExecForeign(pqxx::transaction_base& tx,
                         const std::string& sql,
                         const std::vector<const char*>& params,
                         std::size_t limit,
                         const std::string& before) {
    auto& conn = tx.conn();
    const std::string name = StatementName("sfu_", sql);
    bool prepared = false;
    bool afresh = false;
    {
        const std::lock_guard lock{g_foreign_mutex};
        auto& state = g_foreign[&conn];
        if (state.prepared.count(name) != 0) {
            prepared = true;
            afresh = state.stale.erase(name) != 0;
        } else if (state.prepared.size() < limit) {
            prepared = state.prepared.insert(name).second;
        }
    }
    if (!prepared) {
        if (!before.empty()) tx.exec0(before);
        return tx.exec_params(sql, pqxx::prepare::make_dynamic_params(params));
    }
    if (afresh) conn.unprepare(name);  // DEALLOCATE: allowed inside a transaction
    conn.prepare(name, sql);           // a lookup once declared
    try {
        if (!before.empty()) return tx.exec(before + ExecuteByName(conn, name, params));
        return tx.exec_prepared(name, pqxx::prepare::make_dynamic_params(params));
    } catch (const pqxx::feature_not_supported&) {
        const std::lock_guard lock{g_foreign_mutex};
        g_foreign[&conn].stale.insert(name);
        throw;
    }
}

std::string ExecuteByName(pqxx::connection_base& conn,
                          const std::string& name,
                          const std::vector<const char*>& params) {
    conn.prepare_now(name);  // a lookup once the connection has it
    std::string query = "EXECUTE " + name;
    if (!params.empty()) {
        query += '(';
        for (std::size_t i = 0; i < params.size(); ++i) {
            if (i != 0) query += ", ";
            query += params[i] == nullptr ? std::string("NULL") : conn.quote(std::string(params[i]));
        }
        query += ')';
    }
    return query;
}

void ForgetForeignStatements(const pqxx::connection_base& conn) {
    const std::lock_guard lock{g_foreign_mutex};
    g_foreign.erase(&conn);
}

std::size_t ForeignStatementConnections() {
    const std::lock_guard lock{g_foreign_mutex};
    return g_foreign.size();
}

void UseOwnStatementPlans(pqxx::connection_base& conn) {
    pqxx::nontransaction{conn}.exec(
        "SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan; SET jit = off");
}

pqxx::result ExecTexts(pqxx::transaction_base& tx, const std::string& sql, const std::vector<std::string>& params) {
    std::vector<const char*> pointers;
    pointers.reserve(params.size());
    for (const auto& param : params) pointers.push_back(param.c_str());
    return Exec(tx, sql, pqxx::prepare::make_dynamic_params(pointers));
}

std::string UuidArray(const std::vector<std::string>& ids) {
    std::string array = "{";
    for (const auto& id : ids) {
        if (!IsUuid(id)) throw std::invalid_argument("'" + id.substr(0, 64) + "' is not a UUID");
        if (array.size() > 1) array += ',';
        array += id;
    }
    return array + "}";
}

std::string BigintArray(const std::vector<long long>& ids) {
    std::string array = "{";
    for (const long long id : ids) {
        if (array.size() > 1) array += ',';
        array += std::to_string(id);
    }
    return array + "}";
}

std::string TextArray(const std::vector<std::optional<std::string>>& values) {
    std::string array = "{";
    for (const auto& value : values) {
        if (array.size() > 1) array += ',';
        if (!value) {
            array += "NULL";
            continue;
        }
        array += '"';
        for (const char c : *value) {
            if (c == '"' || c == '\\') array += '\\';
            array += c;
        }
        array += '"';
    }
    return array + "}";
}

pqxx::result ExecArrays(pqxx::transaction_base& tx,
                        const std::string& sql,
                        const std::vector<std::vector<std::optional<std::string>>>& columns) {
    std::vector<std::string> arrays;
    arrays.reserve(columns.size());
    for (const auto& column : columns) arrays.push_back(TextArray(column));
    return ExecTexts(tx, sql, arrays);
}

}  // namespace sagaflow::store
