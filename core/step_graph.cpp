#include "core/step_graph.hpp"

#include <algorithm>

namespace sagaflow {

std::vector<std::string> AfterNames(const SagaDefinition& d, std::size_t step) {
    if (d.steps[step].after) return *d.steps[step].after;
    if (step == 0) return {};
    return {d.steps[step - 1].name};
}

StepGraph::StepGraph(const SagaDefinition& d) {
    const std::size_t n = d.steps.size();
    parents_.resize(n);
    children_.resize(n);
    before_.assign(n, std::vector<bool>(n, false));
    for (std::size_t i = 0; i < n; ++i) {
        for (const auto& name : AfterNames(d, i)) {
            for (std::size_t j = 0; j < n; ++j) {
                if (d.steps[j].name == name && j != i &&
                    std::find(parents_[i].begin(), parents_[i].end(), j) == parents_[i].end()) {
                    parents_[i].push_back(j);
                    children_[j].push_back(i);
                }
            }
        }
        std::sort(parents_[i].begin(), parents_[i].end());
        if (!(i == 0 ? parents_[i].empty() : parents_[i] == std::vector<std::size_t>{i - 1})) linear_ = false;
    }
    for (auto& c : children_) std::sort(c.begin(), c.end());
    // Kahn's algorithm, lowest index first among the ready steps.
    std::vector<std::size_t> waiting(n);
    for (std::size_t i = 0; i < n; ++i) waiting[i] = parents_[i].size();
    std::vector<bool> placed(n, false);
    for (bool progress = true; progress;) {
        progress = false;
        for (std::size_t i = 0; i < n; ++i) {
            if (placed[i] || waiting[i] != 0) continue;
            placed[i] = true;
            progress = true;
            order_.push_back(i);
            for (const auto p : parents_[i]) {
                before_[i][p] = true;
                for (std::size_t a = 0; a < n; ++a) {
                    if (before_[p][a]) before_[i][a] = true;
                }
            }
            for (const auto c : children_[i]) --waiting[c];
            break;  // restart from the lowest index
        }
    }
    if (order_.size() == n) return;
    // A cycle: walk parents from an unplaced step until a step repeats.
    std::size_t at = 0;
    while (placed[at]) ++at;
    std::vector<std::size_t> path;
    std::vector<int> seen_at(n, -1);
    while (seen_at[at] < 0) {
        seen_at[at] = static_cast<int>(path.size());
        path.push_back(at);
        for (const auto p : parents_[at]) {
            if (!placed[p]) {
                at = p;
                break;
            }
        }
    }
    cycle_.assign(path.begin() + seen_at[at], path.end());
    std::reverse(cycle_.begin(), cycle_.end());  // in the order they wait: each waits for the one before
}

}  // namespace sagaflow
