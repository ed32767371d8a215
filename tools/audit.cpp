#include "tools/audit.hpp"

#include <fmt/format.h>

#include <map>
#include <pqxx/pqxx>
#include <set>

#include "store/sweeper.hpp"

namespace sagaflow {
namespace {

constexpr std::size_t kExamples = 5;

void Add(AuditCheck& check, std::string saga_id, std::string detail) {
    ++check.violations;
    if (check.examples.size() < kExamples) check.examples.push_back({std::move(saga_id), std::move(detail)});
}

// Every row of `sql` (saga id, detail) is a violation of `check`.
void Collect(pqxx::transaction_base& tx, AuditCheck& check, const std::string& sql) {
    for (const auto& row : tx.exec(sql)) {
        Add(check, row[0].is_null() ? std::string() : row[0].as<std::string>(), row[1].as<std::string>());
    }
}

// For each step of a canonical definition, the steps that run after it on every run (its
// descendants): `after` when the definition names it, else the step listed before.
std::vector<std::set<std::size_t>> Descendants(const nlohmann::json& steps) {
    const std::size_t n = steps.size();
    std::vector<std::vector<std::size_t>> children(n);
    for (std::size_t i = 0; i < n; ++i) {
        if (!steps[i].contains("after")) {
            if (i > 0) children[i - 1].push_back(i);
            continue;
        }
        for (const auto& name : steps[i]["after"]) {
            for (std::size_t j = 0; j < n; ++j) {
                if (steps[j]["name"] == name) children[j].push_back(i);
            }
        }
    }
    std::vector<std::set<std::size_t>> below(n);
    for (std::size_t i = 0; i < n; ++i) {
        std::vector<std::size_t> stack(children[i].begin(), children[i].end());
        while (!stack.empty()) {
            const std::size_t k = stack.back();
            stack.pop_back();
            if (below[i].insert(k).second) stack.insert(stack.end(), children[k].begin(), children[k].end());
        }
    }
    return below;
}

// The compensation rules, saga by saga, against the definition each saga ran on.
void CheckCompensations(pqxx::transaction_base& tx, AuditCheck& check) {
    struct Phase {
        std::string step, phase, status;
        double dispatched_at = 0;  // seconds; equal for the rows one transaction wrote
    };
    std::map<std::string, std::vector<Phase>> phases;
    for (const auto& row : tx.exec("SELECT saga_id::text, step_name, phase, status, extract(epoch FROM dispatched_at) "
                                   "FROM saga_step ORDER BY saga_id, dispatched_at, phase")) {
        phases[row[0].as<std::string>()].push_back(
            {row[1].as<std::string>(), row[2].as<std::string>(), row[3].as<std::string>(), row[4].as<double>()});
    }
    for (const auto& row :
         tx.exec("SELECT i.saga_id::text, i.status, d.canonical::text FROM saga_instance i JOIN saga_definition d ON "
                 "d.saga_type = i.saga_type AND d.hash = i.definition_hash WHERE i.status IN ('completed', "
                 "'compensated')")) {
        const std::string saga = row[0].as<std::string>();
        const std::string status = row[1].as<std::string>();
        const auto canonical = nlohmann::json::parse(row[2].as<std::string>());
        std::map<std::string, std::size_t> index;
        std::set<std::string> compensatable;
        for (std::size_t i = 0; i < canonical["steps"].size(); ++i) {
            const auto& step = canonical["steps"][i];
            index[step["name"]] = i;
            if (!step["compensation"].is_null()) compensatable.insert(step["name"]);
        }
        std::set<std::string> took_effect;     // actions that succeeded or whose outcome is unknown
        std::vector<std::string> compensated;  // in dispatch order
        std::map<std::string, double> undone_at;
        for (const auto& p : phases[saga]) {
            if (p.phase == "compensation") undone_at[p.step] = p.dispatched_at;
            if (p.phase == "action" && (p.status == "succeeded" || p.status == "timed_out" || p.status == "cancelled"))
                took_effect.insert(p.step);
            if (p.phase == "compensation") {
                compensated.push_back(p.step);
                if (p.status != "succeeded") Add(check, saga, "compensation of " + p.step + " is " + p.status);
            }
        }
        if (status == "completed") {
            if (!compensated.empty()) Add(check, saga, "a completed saga ran compensations");
            continue;
        }
        std::set<std::string> expected;
        for (const auto& step : took_effect) {
            if (compensatable.count(step) != 0) expected.insert(step);
        }
        const std::set<std::string> done(compensated.begin(), compensated.end());
        if (done != expected || done.size() != compensated.size()) {
            Add(check, saga, fmt::format("compensated {} step(s), {} expected", compensated.size(), expected.size()));
        }
        // A step's compensation goes out after (in a later transaction than) the compensation of
        // every step that ran after it and took effect.
        const auto below = Descendants(canonical["steps"]);
        for (const auto& [step, at] : undone_at) {
            for (const std::size_t k : below[index[step]]) {
                const std::string later = canonical["steps"][k]["name"];
                const auto it = undone_at.find(later);
                if (took_effect.count(later) == 0 || compensatable.count(later) == 0) continue;
                if (it == undone_at.end() || it->second >= at) {
                    Add(check,
                        saga,
                        "compensations not in reverse dependency order: " + step + " before " + later +
                            ", which ran after it");
                }
            }
        }
    }
}

// Schema names reach the SQL as quoted identifiers (Name) and, in messages, as quoted literals
// (Literal): a name with a quote or a semicolon is just a name.
std::string Name(pqxx::transaction_base& tx, const std::string& schema) {
    return tx.quote_name(schema);
}

std::string Literal(pqxx::transaction_base& tx, const std::string& text) {
    return tx.quote(text);
}

AuditCheck TerminalOrLive(pqxx::transaction_base& tx, const std::string& grace) {
    AuditCheck terminal{
        "terminal-or-live",
        "every saga is terminal, or open with a live deadline or retry; its definition and steps are stored with it",
        0,
        {}};
    Collect(tx,
            terminal,
            "SELECT i.saga_id::text, 'open (' || i.status || ') with no live deadline or retry' FROM saga_instance i "
            "WHERE i.status IN ('running', 'compensating') AND NOT EXISTS (SELECT 1 FROM saga_step s WHERE s.saga_id = "
            "i.saga_id AND s.status = 'dispatched' AND coalesce(s.next_attempt_at, s.deadline_at) > now() - " +
                grace +
                " * interval '1 second') "
                // The definition a saga is pinned to, and a step's saga (no foreign keys since
                // 013_fewer_index_writes.sql).
                "UNION ALL SELECT i.saga_id::text, 'pinned to definition ' || i.saga_type || ' ' || i.definition_hash "
                "|| ', which is not stored' FROM saga_instance i WHERE NOT EXISTS (SELECT 1 FROM saga_definition d "
                "WHERE d.saga_type = i.saga_type AND d.hash = i.definition_hash) "
                "UNION ALL SELECT s.saga_id::text, 'step ' || s.step_name || ' ' || s.phase || ' has no saga row' FROM "
                "saga_step s WHERE NOT EXISTS (SELECT 1 FROM saga_instance i WHERE i.saga_id = s.saga_id)");
    return terminal;
}

AuditCheck DispatchOnce(pqxx::transaction_base& tx) {
    AuditCheck dispatch{"dispatch-once", "each (saga, step, phase) is dispatched at most once, as one event id", 0, {}};
    Collect(
        tx,
        dispatch,
        "SELECT message_key, 'step ' || (payload->>'stepname') || ' ' || (payload->>'phase') || ' dispatched as ' || "
        "count(DISTINCT event_id) || ' events' FROM outbox WHERE topic LIKE '%.commands' AND payload ? 'stepname' "
        "GROUP BY message_key, payload->>'stepname', payload->>'phase' HAVING count(DISTINCT event_id) > 1 "
        "UNION ALL SELECT saga_id::text, 'step ' || step_name || ' ' || phase || ' has ' || count(*) || ' dispatch "
        "entries' FROM saga_timeline WHERE kind = 'dispatched' GROUP BY saga_id, step_name, phase HAVING count(*) > 1 "
        "UNION ALL SELECT s.saga_id::text, 'step ' || s.step_name || ' ' || s.phase || ' has no outbox row' FROM "
        "saga_step s WHERE s.status <> 'skipped' AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = "
        "s.command_event_id) AND "
        // The sweeper deletes a command's row a TTL (at least store::kMinTtl) after its step ended.
        "(s.completed_at IS NULL OR s.completed_at >= now() - interval '" +
            std::to_string(store::kMinTtl.count()) + " hours')");
    return dispatch;
}

AuditCheck ApplyOnce(pqxx::transaction_base& tx, const std::vector<std::string>& participant_schemas) {
    const auto q = [&](const std::string& schema) { return Name(tx, schema); };
    const auto l = [&](const std::string& text) { return Literal(tx, text); };
    AuditCheck apply{"apply-once",
                     "each reply and each command is applied at most once, with its inbox record in the same commit",
                     0,
                     {}};
    Collect(
        tx,
        apply,
        "SELECT saga_id::text, 'reply ' || event_id || ' applied ' || count(*) || ' times' FROM saga_timeline WHERE "
        "kind = 'reply' GROUP BY saga_id, event_id HAVING count(*) > 1 "
        "UNION ALL SELECT e.saga_id::text, 'reply ' || e.event_id || ' applied without an inbox record' FROM "
        "saga_timeline e WHERE e.kind = 'reply' AND NOT EXISTS (SELECT 1 FROM processed_event p WHERE p.event_id = "
        "e.event_id)");
    for (const auto& schema : participant_schemas) {
        Collect(tx,
                apply,
                "SELECT ps.saga_id::text, " + l(schema + ": ") + " || ps.step_name || ' ' || ps.phase || " +
                    "' applied without an inbox record of its command' FROM " + q(schema) +
                    ".participant_step ps WHERE ps.status IN ('succeeded', 'failed') AND ps.command_event_id IS NOT "
                    "NULL AND NOT EXISTS (SELECT 1 FROM " +
                    q(schema) +
                    ".processed_event pe WHERE pe.event_id = ps.command_event_id) "
                    // Only a tombstone (refused, null_compensation) has no command: an effect always has one.
                    "UNION ALL SELECT ps.saga_id::text, " +
                    l(schema + ": ") + " || ps.step_name || ' ' || ps.phase || ' ' || ps.status || " +
                    "' with no command id (only refused and null_compensation records have none)' FROM " + q(schema) +
                    ".participant_step ps WHERE ps.status IN ('succeeded', 'failed') AND ps.command_event_id IS NULL "
                    "UNION ALL SELECT ps.saga_id::text, " +
                    l(schema + ": applied command ") +
                    " || ps.command_event_id || ', not the engine''s command of ' || ps.step_name "
                    "|| ' ' || ps.phase FROM " +
                    q(schema) +
                    ".participant_step ps JOIN saga_step s ON s.saga_id = ps.saga_id AND s.step_name = ps.step_name "
                    "AND s.phase = ps.phase WHERE ps.command_event_id <> s.command_event_id");
    }
    return apply;
}

// A saga pruned from the engine's history (sagaflow prune, history retention) leaves its
// participants' records behind; it was finished and unchanged for at least the shortest history
// horizon, which is the longest deduplication TTL (engine/repository/retention.hpp,
// kMinHistoryRetention), so a record newer than that belongs to a saga the engine never started.
// Older ones are counted as a warning.
constexpr auto kPrunableAfterHours = store::kMaxTtl.count();

AuditCheck KnownSaga(pqxx::transaction_base& tx,
                     const std::vector<std::string>& participant_schemas,
                     const std::string& payments_schema,
                     long long& unmatched_old) {
    const auto q = [&](const std::string& schema) { return Name(tx, schema); };
    const auto l = [&](const std::string& text) { return Literal(tx, text); };
    AuditCheck known{"known-saga",
                     "every participant record and payment of the last " + std::to_string(kPrunableAfterHours) +
                         " h belongs to a saga the engine started (older ones may be of pruned sagas)",
                     0,
                     {}};
    const std::string unknown = " NOT EXISTS (SELECT 1 FROM saga_instance i WHERE i.saga_id = x.saga_id) ";
    const std::string recent = "x.at >= now() - interval '" + std::to_string(kPrunableAfterHours) + " hours'";
    std::vector<std::pair<std::string, std::string>> tables;  // (FROM ... x with saga_id and at, what)
    for (const auto& schema : participant_schemas) {
        tables.emplace_back(
            "(SELECT saga_id, applied_at AS at, step_name || ' ' || phase || ' ' || status AS what FROM " + q(schema) +
                ".participant_step) x",
            schema + ": record of ");
    }
    if (!payments_schema.empty()) {
        tables.emplace_back("(SELECT saga_id, created_at AS at, 'payment ' || payment_id AS what FROM " +
                                q(payments_schema) + ".payment) x",
                            payments_schema + ": ");
    }
    for (const auto& [from, prefix] : tables) {
        Collect(tx,
                known,
                "SELECT x.saga_id::text, " + l(prefix) + " || x.what || ' for a saga the engine never started' FROM " +
                    from + " WHERE" + unknown + "AND " + recent);
        unmatched_old +=
            tx.exec1("SELECT count(*) FROM " + from + " WHERE" + unknown + "AND NOT " + recent)[0].as<long long>();
    }
    return known;
}

AuditCheck NoHanging(pqxx::transaction_base& tx, const std::vector<std::string>& participant_schemas) {
    const auto q = [&](const std::string& schema) { return Name(tx, schema); };
    const auto l = [&](const std::string& text) { return Literal(tx, text); };
    AuditCheck hanging{"no-hanging",
                       "no compensation ran without its action (unless a null compensation), no action after its "
                       "compensation",
                       0,
                       {}};
    for (const auto& schema : participant_schemas) {
        const std::string t = q(schema) + ".participant_step";
        Collect(tx,
                hanging,
                "SELECT c.saga_id::text, " + l(schema + ": compensation of ") +
                    " || c.step_name || ' ran without its "
                    "action' FROM " +
                    t +
                    " c WHERE c.phase = 'compensation' AND c.status = 'succeeded' AND NOT EXISTS "
                    "(SELECT 1 FROM " +
                    t +
                    " a WHERE a.saga_id = c.saga_id AND a.step_name = c.step_name AND a.phase = "
                    "'action' AND a.status = 'succeeded' AND a.applied_at <= c.applied_at) "
                    "UNION ALL SELECT a.saga_id::text, " +
                    l(schema + ": action ") +
                    " || a.step_name || ' landed after its "
                    "compensation' FROM " +
                    t + " a JOIN " + t +
                    " c ON c.saga_id = a.saga_id AND c.step_name = "
                    "a.step_name AND c.phase = 'compensation' WHERE a.phase = 'action' AND a.status = 'succeeded' AND "
                    "a.applied_at > c.applied_at");
    }
    return hanging;
}

AuditCheck OutboxPublished(pqxx::transaction_base& tx,
                           const std::vector<std::string>& participant_schemas,
                           const std::string& grace) {
    const auto q = [&](const std::string& schema) { return Name(tx, schema); };
    const auto l = [&](const std::string& text) { return Literal(tx, text); };
    // A resend re-arms its row (outbox::Rearm: due at once, next_attempt_at = now()): it is late
    // only once it waited longer than the grace since then, however old the row. A row whose
    // publication failed and backs off stays measured from its creation.
    static const std::string kRearmed = "(attempts > 0 AND last_error IS NULL AND next_attempt_at IS NOT NULL)";
    AuditCheck outbox{"outbox", "every outbox row is published; no event id stands for two payloads", 0, {}};
    std::vector<std::string> outboxes{"outbox"};
    for (const auto& schema : participant_schemas) outboxes.push_back(q(schema) + ".outbox");
    std::string all;
    for (const auto& table : outboxes) {
        Collect(tx,
                outbox,
                "SELECT message_key, " + l(table + " row ") + " || event_id || ' unpublished ' || CASE WHEN " +
                    kRearmed +
                    " THEN round(extract(epoch FROM now() - next_attempt_at)) || ' s after it was re-armed "
                    "(a resend after ' || attempts || ' publication(s))' ELSE 'since it was created ' || "
                    "round(extract(epoch FROM now() - created_at)) || ' s ago' || CASE WHEN last_error IS NOT NULL "
                    "THEN ' (' || attempts || ' failed attempt(s): ' || last_error || ')' ELSE '' END END FROM " +
                    table + " WHERE published_at IS NULL AND CASE WHEN " + kRearmed +
                    " THEN next_attempt_at ELSE created_at END < now() - " + grace + " * interval '1 second'");
        all += (all.empty() ? "" : " UNION ALL ") + std::string("SELECT event_id, payload::text AS p FROM ") + table;
    }
    Collect(tx,
            outbox,
            "SELECT NULL, 'event ' || event_id || ' stands for ' || count(DISTINCT p) || ' payloads' FROM (" + all +
                ") e GROUP BY event_id HAVING count(DISTINCT p) > 1");
    return outbox;
}

AuditCheck Money(pqxx::transaction_base& tx, const std::string& payments_schema) {
    const auto q = [&](const std::string& schema) { return Name(tx, schema); };
    const std::string pay = q(payments_schema) + ".payment";
    const std::string refund = q(payments_schema) + ".refund";
    AuditCheck money{"money",
                     "one payment per (provider, external id) and per saga; every refund matches a charge of its "
                     "saga; compensated sagas refunded, completed ones not",
                     0,
                     {}};
    Collect(tx,
            money,
            "SELECT min(saga_id::text), 'payment ' || payment_provider || '/' || external_payment_id || ' charged "
            "' || count(*) || ' times' FROM " +
                pay +
                " GROUP BY payment_provider, external_payment_id HAVING "
                "count(*) > 1 "
                "UNION ALL SELECT saga_id::text, count(*) || ' payments for one saga' FROM " +
                pay +
                " GROUP BY "
                "saga_id HAVING count(*) > 1 "
                "UNION ALL SELECT r.saga_id::text, 'refund of payment ' || r.payment_id || ' matches no charge of its "
                "saga' FROM " +
                refund + " r LEFT JOIN " + pay +
                " p ON p.payment_id = r.payment_id WHERE "
                "p.payment_id IS NULL OR p.saga_id <> r.saga_id "
                "UNION ALL SELECT p.saga_id::text, 'charge of a compensated saga not refunded' FROM " +
                pay +
                " p JOIN "
                "saga_instance i ON i.saga_id = p.saga_id WHERE i.status = 'compensated' AND NOT EXISTS (SELECT 1 "
                "FROM " +
                refund +
                " r WHERE r.payment_id = p.payment_id) "
                "UNION ALL SELECT r.saga_id::text, 'refund in a saga that completed' FROM " +
                refund +
                " r JOIN "
                "saga_instance i ON i.saga_id = r.saga_id WHERE i.status = 'completed'");
    return money;
}

}  // namespace

bool AuditReport::Ok() const {
    return std::all_of(checks.begin(), checks.end(), [](const auto& c) { return c.violations == 0; });
}

nlohmann::json AuditReport::ToJson() const {
    nlohmann::json out{{"sagas", sagas},
                       {"ok", Ok()},
                       {"unmatchedOldRecords", unmatched_old_records},
                       {"checks", nlohmann::json::array()}};
    for (const auto& c : checks) {
        nlohmann::json examples = nlohmann::json::array();
        for (const auto& v : c.examples) examples.push_back({{"sagaId", v.saga_id}, {"detail", v.detail}});
        out["checks"].push_back(
            {{"name", c.name}, {"rule", c.rule}, {"violations", c.violations}, {"examples", examples}});
    }
    return out;
}

std::string AuditReport::Summary() const {
    std::string out = fmt::format("audit of {} saga(s):\n", sagas);
    for (const auto& c : checks) {
        out += fmt::format("  {:<4} {:<22} {}\n", c.violations == 0 ? "ok" : "FAIL", c.name, c.rule);
        for (const auto& v : c.examples) out += fmt::format("         saga {}: {}\n", v.saga_id, v.detail);
        if (c.violations > static_cast<long long>(c.examples.size())) {
            out += fmt::format("         ... {} violation(s) in all\n", c.violations);
        }
    }
    if (unmatched_old_records > 0) {
        out += fmt::format(
            "  warning: {} participant record(s) or payment(s) older than the shortest history retention name a saga "
            "that is not stored (pruned, or never started)\n",
            unmatched_old_records);
    }
    out += Ok() ? "every guarantee holds\n" : "GUARANTEES BROKEN\n";
    return out;
}

AuditReport AuditBlocking(const AuditOptions& options) {
    pqxx::connection conn{options.db_url};
    pqxx::transaction<pqxx::isolation_level::repeatable_read> tx{conn};
    AuditReport report;
    report.sagas = tx.exec1("SELECT count(*) FROM saga_instance")[0].as<long long>();
    const std::string grace = std::to_string(options.grace.count());
    report.checks.push_back(TerminalOrLive(tx, grace));
    report.checks.push_back(DispatchOnce(tx));
    report.checks.push_back(ApplyOnce(tx, options.participant_schemas));
    report.checks.push_back(
        KnownSaga(tx, options.participant_schemas, options.payments_schema, report.unmatched_old_records));
    AuditCheck compensation{
        "compensation",
        "a compensated saga compensated each step that took effect exactly once, newest first; a completed one none",
        0,
        {}};
    CheckCompensations(tx, compensation);
    report.checks.push_back(std::move(compensation));
    report.checks.push_back(NoHanging(tx, options.participant_schemas));
    report.checks.push_back(OutboxPublished(tx, options.participant_schemas, grace));
    if (!options.payments_schema.empty()) report.checks.push_back(Money(tx, options.payments_schema));
    return report;
}

}  // namespace sagaflow
