// Batched statements' parameters (store/array_columns.hpp): numbered once, from the declarations.
#include <doctest/doctest.h>

#include <stdexcept>

#include "store/array_columns.hpp"

using sagaflow::store::ArrayColumns;
using sagaflow::store::ArrayStatement;

TEST_CASE("two sets in one statement: the second numbered after the first, each value in its column") {
    ArrayColumns steps{{{"saga_id", "uuid"}, {"step_name", "text"}, {"timeout_ms", "bigint"}}};
    steps.Add({"0190a5b2-7c3e-7def-8a12-3456789abcde", "charge", "30000"});
    steps.Add({"0190a5b2-7c3e-7def-8a12-3456789abcdf", "ship", std::nullopt});
    ArrayColumns flags{{{"open", "bool"}}};
    flags.Add({"t"});
    ArrayStatement statement;
    CHECK(statement.Unnest(steps, "v", true) ==
          "unnest($1::uuid[], $2::text[], $3::bigint[]) WITH ORDINALITY AS v(saga_id, step_name, timeout_ms, n)");
    CHECK(statement.Unnest(flags, "f") == "unnest($4::bool[]) AS f(open)");
    REQUIRE(statement.Arrays().size() == 4);
    CHECK(statement.Arrays()[1] == std::vector<ArrayColumns::Value>{"charge", "ship"});
    CHECK(statement.Arrays()[2] == std::vector<ArrayColumns::Value>{"30000", std::nullopt});
    CHECK(statement.Arrays()[3] == std::vector<ArrayColumns::Value>{"t"});
}

TEST_CASE("an empty set binds empty arrays, and a row of the wrong width is refused") {
    ArrayColumns sagas{{{"saga_id", "uuid"}, {"status", "text"}}};
    ArrayStatement statement;
    CHECK(statement.Unnest(sagas, "r") == "unnest($1::uuid[], $2::text[]) AS r(saga_id, status)");
    CHECK(statement.Arrays() == std::vector<std::vector<ArrayColumns::Value>>{{}, {}});
    CHECK_THROWS_AS(sagas.Add({"only one"}), std::logic_error);
    sagas.Add({"0190a5b2-7c3e-7def-8a12-3456789abcde", "running"});
    CHECK(sagas.Rows() == 1);
    sagas.Clear();
    CHECK(sagas.Rows() == 0);
    CHECK(sagas.Values()[0].empty());
}
