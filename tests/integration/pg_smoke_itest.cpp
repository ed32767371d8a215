// Proves the private PostgreSQL is a real server: transactions commit, roll back, and are seen
// across connections.
#include <doctest/doctest.h>

#include <pqxx/pqxx>

#include "tests/support/services.hpp"

using sagaflow::testing::ScratchDatabase;

TEST_CASE("a committed transaction is visible to another connection; a rolled back one is not") {
    ScratchDatabase db;
    pqxx::connection writer{db.Url()};
    pqxx::connection reader{db.Url()};
    {
        pqxx::work tx{writer};
        tx.exec("CREATE TABLE account (id int PRIMARY KEY, balance numeric(19,4) NOT NULL)");
        tx.exec("INSERT INTO account VALUES (1, 100.5000)");
        tx.commit();
    }
    {
        pqxx::work tx{writer};
        tx.exec("UPDATE account SET balance = balance - 1000 WHERE id = 1");
        tx.abort();
    }
    pqxx::read_transaction check{reader};
    const auto row = check.exec1(
        "SELECT balance::text, current_setting('fsync'), current_setting('synchronous_commit') "
        "FROM account WHERE id = 1");
    CHECK(row[0].as<std::string>() == "100.5000");
    // Durability stays on in tests: what we measure and prove holds for production settings.
    CHECK(row[1].as<std::string>() == "on");
    CHECK(row[2].as<std::string>() == "on");
}

TEST_CASE("each test gets a database of its own") {
    ScratchDatabase a;
    ScratchDatabase b;
    CHECK(a.Name() != b.Name());
    pqxx::connection conn{a.Url()};
    pqxx::read_transaction tx{conn};
    CHECK(tx.exec1("SELECT current_database()")[0].as<std::string>() == a.Name());
}
