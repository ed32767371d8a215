#include "core/upgrade_check.hpp"

#include "core/step_graph.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace sagaflow::upgrade {
namespace {

// The leaf paths of a command template ("orderId", "amount.value").
void Fields(const nlohmann::json& tmpl, const std::string& prefix, std::set<std::string>& out) {
    if (!tmpl.is_object()) {
        if (!prefix.empty()) out.insert(prefix);
        return;
    }
    for (const auto& [key, value] : tmpl.items()) Fields(value, prefix.empty() ? key : prefix + "." + key, out);
}

std::set<std::string> Fields(const nlohmann::json& tmpl) {
    std::set<std::string> out;
    Fields(tmpl, "", out);
    return out;
}

// Every "$." path a template reads.
void References(const nlohmann::json& tmpl, std::set<std::string>& out) {
    if (tmpl.is_string()) {
        const auto& text = tmpl.get_ref<const std::string&>();
        if (text.rfind("$.", 0) == 0) out.insert(text);
    } else if (tmpl.is_object() || tmpl.is_array()) {
        for (const auto& value : tmpl) References(value, out);
    }
}

// What `a` has that `b` has not.
std::set<std::string> Minus(const std::set<std::string>& a, const std::set<std::string>& b) {
    std::set<std::string> out;
    std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::inserter(out, out.end()));
    return out;
}

std::string Join(const std::set<std::string>& items) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
    return out;
}

// Whether `path` reads `prefix` or something under it ("$.data.a" reads "$.data.a.b" and the reverse).
bool Reads(const std::string& path, const std::string& prefix) {
    const auto under = [](const std::string& a, const std::string& b) {
        return a == b || (a.size() > b.size() && a.compare(0, b.size(), b) == 0 && a[b.size()] == '.');
    };
    return under(path, prefix) || under(prefix, path);
}

}  // namespace

std::string_view ToString(Verdict verdict) noexcept {
    switch (verdict) {
        case Verdict::kSafe:
            return "safe";
        case Verdict::kNeedsBothHandlers:
            return "needs-both-handlers";
        case Verdict::kUnsafe:
            return "unsafe";
    }
    return "?";
}

Verdict Report::Worst() const {
    Verdict worst = Verdict::kSafe;
    for (const auto& c : changes) worst = std::max(worst, c.verdict);
    return worst;
}

Report Compare(const SagaDefinition& o, const SagaDefinition& n) {
    Report r;
    r.saga = o.name;
    r.old_version = o.version;
    r.new_version = n.version;
    r.old_hash = o.hash;
    r.new_hash = n.hash;
    const auto add = [&](std::string kind, std::string step, Verdict verdict, std::string reason) {
        r.changes.push_back({std::move(kind), std::move(step), verdict, std::move(reason)});
    };

    // Match OLD's steps to NEW's: by name; what is left, as a rename, by participant and command
    // type, else by position and participant.
    std::map<std::size_t, std::size_t> match;  // old index -> new index
    std::set<std::size_t> taken;
    for (std::size_t i = 0; i < o.steps.size(); ++i) {
        for (std::size_t j = 0; j < n.steps.size(); ++j) {
            if (o.steps[i].name == n.steps[j].name) {
                match[i] = j;
                taken.insert(j);
            }
        }
    }
    std::set<std::size_t> renamed;
    for (const bool by_type : {true, false}) {
        for (std::size_t i = 0; i < o.steps.size(); ++i) {
            if (match.count(i)) continue;
            for (std::size_t j = 0; j < n.steps.size(); ++j) {
                if (taken.count(j) || o.steps[i].participant != n.steps[j].participant) continue;
                if (by_type ? o.steps[i].action.type == n.steps[j].action.type : i == j) {
                    match[i] = j;
                    taken.insert(j);
                    renamed.insert(i);
                    break;
                }
            }
        }
    }

    for (std::size_t i = 0; i < o.steps.size(); ++i) {
        const auto& os = o.steps[i];
        const auto it = match.find(i);
        if (it == match.end()) {
            add("step-removed",
                os.name,
                Verdict::kNeedsBothHandlers,
                "OLD's instances still send " + os.action.type +
                    (os.compensation ? " (and may send " + os.compensation->type + ")" : std::string()) + " to '" +
                    os.participant + "': keep those handlers until they have finished");
            continue;
        }
        const auto& ns = n.steps[it->second];
        if (renamed.count(i)) {
            add("step-renamed",
                os.name,
                Verdict::kSafe,
                "now '" + ns.name +
                    "'; OLD's instances keep the old name in every command (participants key their records "
                    "by saga, step and phase, the same for all of one instance's commands)");
        }
        if (os.participant != ns.participant) {
            add("participant-changed",
                os.name,
                Verdict::kNeedsBothHandlers,
                "OLD's instances send " + os.action.type + " to '" + os.participant + "', NEW's to '" + ns.participant +
                    "': '" + os.participant + "' must keep handling it until they have finished");
        }
        if (os.kind != ns.kind) {
            add("kind-changed",
                os.name,
                Verdict::kSafe,
                std::string(ToString(os.kind)) + " -> " + std::string(ToString(ns.kind)) +
                    "; OLD's instances keep the old kind (they run on the definition they started with)");
        }
        const bool same_type = os.action.type == ns.action.type;
        if (!same_type) {
            add("command-renamed",
                os.name,
                Verdict::kNeedsBothHandlers,
                os.action.type + " -> " + ns.action.type + "; OLD's instances still send " + os.action.type +
                    ": keep its handler beside the new one until they have finished");
        } else {
            const auto old_fields = Fields(os.action.send), new_fields = Fields(ns.action.send);
            const auto added = Minus(new_fields, old_fields), removed = Minus(old_fields, new_fields);
            if (!added.empty()) {
                add("send-field-added",
                    os.name,
                    Verdict::kUnsafe,
                    ns.action.type + " gains " + Join(added) +
                        ", which the commands of OLD's instances lack (same type): a handler written for NEW breaks "
                        "on them. Give NEW's command a new type (e.g. a .v2) and keep the old handler, or make the "
                        "handler accept the field's absence");
            }
            if (!removed.empty()) {
                add("send-field-removed",
                    os.name,
                    Verdict::kSafe,
                    ns.action.type + " no longer sends " + Join(removed) +
                        "; OLD's instances still do, and a handler ignores what it does not read");
            }
        }
        if (os.compensation && !ns.compensation) {
            add("compensation-removed",
                os.name,
                Verdict::kNeedsBothHandlers,
                "OLD's instances may still compensate this step with " + os.compensation->type +
                    ": keep that handler until they have finished");
        } else if (!os.compensation && ns.compensation) {
            add("compensation-added",
                os.name,
                Verdict::kSafe,
                ns.compensation->type + "; OLD's instances never send it");
        } else if (os.compensation && ns.compensation) {
            if (os.compensation->type != ns.compensation->type) {
                add("compensation-renamed",
                    os.name,
                    Verdict::kNeedsBothHandlers,
                    os.compensation->type + " -> " + ns.compensation->type + "; OLD's instances may still send " +
                        os.compensation->type + ": keep its handler until they have finished");
            } else {
                const auto added = Minus(Fields(ns.compensation->send), Fields(os.compensation->send));
                if (!added.empty()) {
                    add("send-field-added",
                        os.name,
                        Verdict::kUnsafe,
                        ns.compensation->type + " gains " + Join(added) +
                            ", which the compensations of OLD's instances lack (same type): a handler written "
                            "for NEW cannot undo their steps. Give it a new type and keep the old handler");
                }
            }
        }
        // A reply field OLD saves and NEW no longer reads: once the participant answers as NEW
        // expects, OLD's instances save null and send it on.
        std::set<std::string> new_reads;
        References(ns.save, new_reads);
        for (const auto& step : n.steps) {
            References(step.action.send, new_reads);
            if (step.compensation) References(step.compensation->send, new_reads);
        }
        if (os.save.is_object()) {
            for (const auto& [key, source] : os.save.items()) {
                if (!source.is_string()) continue;
                const std::string from = source.get<std::string>();
                if (from.rfind("$.reply.", 0) != 0) continue;
                const std::string field = from.substr(8);
                const bool still = std::any_of(new_reads.begin(), new_reads.end(), [&](const std::string& path) {
                    return Reads(path, "$.reply." + field) || Reads(path, "$.steps." + ns.name + ".reply." + field);
                });
                if (still) continue;
                const std::string saved = "$.data." + key;  // (clang 14 captures no structured binding)
                std::set<std::string> readers;              // OLD's commands that send it on
                for (const auto& step : o.steps) {
                    for (const auto* spec : {&step.action, step.compensation ? &*step.compensation : nullptr}) {
                        if (spec == nullptr) continue;
                        std::set<std::string> reads;
                        References(spec->send, reads);
                        if (std::any_of(reads.begin(), reads.end(), [&](const std::string& path) {
                                return Reads(path, saved);
                            })) {
                            readers.insert(spec->type);
                        }
                    }
                }
                if (readers.empty()) continue;
                add("saved-field-dropped",
                    os.name,
                    Verdict::kUnsafe,
                    "OLD saves $.data." + key + " from the reply's '" + field + "', which NEW no longer reads; " +
                        Join(readers) +
                        " of OLD's instances send it. Once the participant answers as NEW expects, those commands "
                        "go out with null: keep the field in the reply until OLD's instances have finished");
            }
        }
    }
    for (std::size_t j = 0; j < n.steps.size(); ++j) {
        if (taken.count(j)) continue;
        add("step-added", n.steps[j].name, Verdict::kSafe, "OLD's instances never reach it");
    }
    // Order of the steps both have.
    std::vector<std::size_t> order;
    for (const auto& [i, j] : match) order.push_back(j);
    if (!std::is_sorted(order.begin(), order.end())) {
        add("steps-reordered",
            "",
            Verdict::kSafe,
            "OLD's instances keep OLD's order (they run on the definition they started with)");
    }
    // The graph: which steps each matched step waits for, and its condition.
    for (const auto& [i, j] : match) {
        std::set<std::string> before, after;
        for (const auto& name : AfterNames(o, i)) {
            for (const auto& [k, l] : match) {
                if (o.steps[k].name == name) before.insert(n.steps[l].name);
            }
        }
        for (const auto& name : AfterNames(n, j)) after.insert(name);
        std::set<std::string> added, removed;
        for (const auto& name : after) {
            if (before.count(name) == 0) added.insert(name);
        }
        for (const auto& name : before) {
            if (after.count(name) == 0) removed.insert(name);
        }
        const std::string& step = n.steps[j].name;
        if (!removed.empty()) {
            add(after.size() < before.size() || after.empty() ? "branch-split" : "dependency-removed",
                o.steps[i].name,
                Verdict::kSafe,
                "'" + step + "' no longer waits for " + Join(removed) +
                    " and may run beside it; OLD's instances keep OLD's order");
        }
        if (!added.empty()) {
            add(after.size() > 1 && before.size() <= 1 ? "branch-joined" : "dependency-added",
                o.steps[i].name,
                Verdict::kSafe,
                "'" + step + "' now also waits for " + Join(added) + "; OLD's instances keep OLD's order");
        }
        const auto& was = o.steps[i].when;
        const auto& is = n.steps[j].when;
        if (!was && is) {
            add("made-conditional",
                o.steps[i].name,
                Verdict::kSafe,
                "NEW skips it unless " + Describe(*is) +
                    "; OLD's instances always run it, so its participant "
                    "still gets its commands from them");
        } else if (was && !is) {
            add("condition-removed",
                o.steps[i].name,
                Verdict::kSafe,
                "NEW always runs it; OLD's instances keep "
                "their condition");
        } else if (was && is && ToJson(*was) != ToJson(*is)) {
            add("condition-changed",
                o.steps[i].name,
                Verdict::kSafe,
                "NEW runs it when " + Describe(*is) + " (OLD: " + Describe(*was) + "); OLD's instances keep theirs");
        }
    }
    const auto pivot_name = [](const SagaDefinition& d) {
        const auto p = d.PivotIndex();
        return p ? d.steps[*p].name : std::string("(none)");
    };
    if (pivot_name(o) != pivot_name(n)) {
        add("pivot-moved",
            "",
            Verdict::kSafe,
            pivot_name(o) + " -> " + pivot_name(n) +
                "; OLD's instances keep their point of no return, new ones use NEW's");
    }
    return r;
}

std::vector<std::string> HandlersNeeded(const SagaDefinition& d, std::size_t current_step, bool compensating) {
    std::vector<std::string> out;
    if (current_step >= d.steps.size()) return out;
    if (!compensating) out.push_back(d.steps[current_step].participant + ": " + d.steps[current_step].action.type);
    // Past the point of no return (the first pivot or retriable step) nothing is compensated.
    for (std::size_t k = 0; k <= current_step && !compensating; ++k) {
        if (d.steps[k].kind != StepKind::kCompensatable) return out;
    }
    for (std::size_t k = current_step + 1; k-- > 0;) {
        const auto& step = d.steps[k];
        if (step.compensation) out.push_back(step.participant + ": " + step.compensation->type);
    }
    return out;
}

nlohmann::json Report::Json() const {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& c : changes) {
        list.push_back({{"kind", c.kind},
                        {"step", c.step.empty() ? nlohmann::json() : nlohmann::json(c.step)},
                        {"verdict", ToString(c.verdict)},
                        {"reason", c.reason}});
    }
    return {{"saga", saga},
            {"old", {{"version", old_version}, {"hash", old_hash}}},
            {"new", {{"version", new_version}, {"hash", new_hash}}},
            {"verdict", ToString(Worst())},
            {"changes", list}};
}

std::string Report::Text() const {
    std::ostringstream out;
    out << "upgrade-check " << saga << " v" << old_version << " -> v" << new_version << ": " << ToString(Worst())
        << "\n";
    if (changes.empty()) out << "  no change that running instances could notice\n";
    for (const auto& c : changes) {
        out << "  " << ToString(c.verdict) << "  " << c.kind << (c.step.empty() ? "" : " '" + c.step + "'") << ": "
            << c.reason << "\n";
    }
    return out.str();
}

}  // namespace sagaflow::upgrade
