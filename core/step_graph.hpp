#pragma once
// The order of a saga's steps: a directed acyclic graph. A step waits for the steps its `after`
// names, or, without `after`, for the step listed before it. Steps that are neither ancestor nor
// descendant of each other may run at the same time.

#include <cstddef>
#include <optional>
#include <vector>

#include "core/definition.hpp"

namespace sagaflow {

class StepGraph {
  public:
    // Names that match no step are left out (the loader reports them).
    explicit StepGraph(const SagaDefinition& definition);

    std::size_t Size() const noexcept { return parents_.size(); }
    const std::vector<std::size_t>& Parents(std::size_t step) const { return parents_[step]; }
    const std::vector<std::size_t>& Children(std::size_t step) const { return children_[step]; }
    // `a` runs before `b` on every run (a strict ancestor). False on a cycle's steps.
    bool Before(std::size_t a, std::size_t b) const { return before_[b][a]; }
    // Neither runs before the other: they may run at the same time.
    bool Concurrent(std::size_t a, std::size_t b) const { return a != b && !Before(a, b) && !Before(b, a); }
    // Every step has the one before it as its only parent (the steps form a straight line).
    bool Linear() const noexcept { return linear_; }
    // The steps in an order that puts every parent before its children (stable: by index among
    // steps that are ready together), or, when the steps form a cycle, the steps of one cycle in
    // the order they wait for each other.
    const std::vector<std::size_t>& Order() const noexcept { return order_; }
    const std::vector<std::size_t>& Cycle() const noexcept { return cycle_; }

  private:
    std::vector<std::vector<std::size_t>> parents_;
    std::vector<std::vector<std::size_t>> children_;
    std::vector<std::vector<bool>> before_;  // before_[b][a]: a is an ancestor of b
    std::vector<std::size_t> order_;
    std::vector<std::size_t> cycle_;
    bool linear_ = true;
};

// The parents of a step as the definition states them: `after`'s names, or the step before it.
std::vector<std::string> AfterNames(const SagaDefinition& definition, std::size_t step);

}  // namespace sagaflow
