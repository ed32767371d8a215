#pragma once
// Batched statements without hand-numbered parameters. A batch travels as one array per column
// (`unnest($1::uuid[], $2::text[], ...)`); an ArrayColumns declares its columns once (name and
// SQL type) and takes rows in that order, and ArrayStatement numbers the parameters of every
// set it is given, so a column added to a set cannot shift another set's numbers by hand.
//
//     ArrayColumns steps{{"saga_id", "uuid"}, {"step_name", "text"}, {"timeout_ms", "bigint"}};
//     steps.Add({id, "charge", "30000"});
//     ArrayStatement s;
//     const std::string sql = "INSERT INTO t SELECT * FROM " + s.Unnest(steps, "v");
//     // FROM unnest($1::uuid[], $2::text[], $3::bigint[]) AS v(saga_id, step_name, timeout_ms)
//     s.Exec(tx, sql);

#include <optional>
#include <pqxx/transaction_base>
#include <string>
#include <vector>

#include "store/transaction.hpp"

namespace sagaflow::store {

class ArrayColumns {
  public:
    struct Column {
        std::string name;
        std::string type;  // the element type: uuid, text, bigint, int, bool (`text` for json: cast in SQL)
    };
    using Value = std::optional<std::string>;  // nullopt: NULL

    explicit ArrayColumns(std::vector<Column> columns);

    // One row, a value per column in declaration order; std::logic_error on another count.
    void Add(std::vector<Value> row);
    std::size_t Rows() const noexcept { return rows_; }
    const std::vector<Column>& Columns() const noexcept { return columns_; }
    const std::vector<std::vector<Value>>& Values() const noexcept { return values_; }
    void Clear();

  private:
    std::vector<Column> columns_;
    std::vector<std::vector<Value>> values_;  // per column
    std::size_t rows_ = 0;
};

class ArrayStatement {
  public:
    // `unnest($n::type[], ...) [WITH ORDINALITY] AS alias(name, ... [, n])`, numbered after the
    // sets given before; the set's arrays become those parameters.
    std::string Unnest(const ArrayColumns& set, const std::string& alias, bool ordinality = false);
    // Runs `sql` with the parameters of every set given to Unnest, in order.
    pqxx::result Exec(pqxx::transaction_base& tx, const std::string& sql) const;
    // The same, to run later (a consumer's handler hands its last write to the commit).
    Statement ToStatement(std::string sql) const;
    // The parameters so far, one array per column (tests).
    const std::vector<std::vector<ArrayColumns::Value>>& Arrays() const noexcept { return arrays_; }

  private:
    std::vector<std::vector<ArrayColumns::Value>> arrays_;
};

}  // namespace sagaflow::store
