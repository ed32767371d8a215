#include "store/array_columns.hpp"

#include <stdexcept>

#include "store/prepared.hpp"

namespace sagaflow::store {

ArrayColumns::ArrayColumns(std::vector<Column> columns) : columns_(std::move(columns)), values_(columns_.size()) {}

void ArrayColumns::Add(std::vector<Value> row) {
    if (row.size() != columns_.size()) {
        throw std::logic_error("a row of " + std::to_string(row.size()) + " values for " +
                               std::to_string(columns_.size()) + " columns (first: " + columns_.front().name + ")");
    }
    for (std::size_t i = 0; i < row.size(); ++i) values_[i].push_back(std::move(row[i]));
    ++rows_;
}

void ArrayColumns::Clear() {
    for (auto& column : values_) column.clear();
    rows_ = 0;
}

std::string ArrayStatement::Unnest(const ArrayColumns& set, const std::string& alias, bool ordinality) {
    std::string params;
    std::string names;
    for (std::size_t i = 0; i < set.Columns().size(); ++i) {
        const auto& column = set.Columns()[i];
        params += (i == 0 ? "$" : ", $") + std::to_string(arrays_.size() + 1) + "::" + column.type + "[]";
        names += (i == 0 ? "" : ", ") + column.name;
        arrays_.push_back(set.Values()[i]);
    }
    return "unnest(" + params + ")" + (ordinality ? " WITH ORDINALITY" : "") + " AS " + alias + "(" + names +
           (ordinality ? ", n" : "") + ")";
}

pqxx::result ArrayStatement::Exec(pqxx::transaction_base& tx, const std::string& sql) const {
    const auto statement = ToStatement(sql);
    return ExecTexts(tx, statement.sql, statement.params);
}

Statement ArrayStatement::ToStatement(std::string sql) const {
    Statement statement{std::move(sql), {}};
    statement.params.reserve(arrays_.size());
    for (const auto& column : arrays_) statement.params.push_back(TextArray(column));
    return statement;
}

}  // namespace sagaflow::store
