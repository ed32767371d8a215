#include "store/prepared.hpp"

#include <cstdio>
#include <functional>

namespace sagaflow::store {

std::string PreparedName(pqxx::connection_base& conn, const std::string& sql) {
    char name[24];
    std::snprintf(name, sizeof name, "sf_%016zx", std::hash<std::string>{}(sql));
    // libpqxx keeps the definitions per connection: the same name and text again is a lookup;
    // the statement reaches the server on its first use (and again after a reconnect).
    conn.prepare(name, sql);
    return name;
}

}  // namespace sagaflow::store
