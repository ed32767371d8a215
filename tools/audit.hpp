#pragma once
// The audit: an offline checker that reads the engine's tables (and the participants' schemas)
// and states, per guarantee, whether any saga broke it. `sagaflow audit` prints it; exit 0 only
// when every check holds.

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sagaflow {

struct AuditOptions {
    std::string db_url;                            // the engine's database (its default schema)
    std::vector<std::string> participant_schemas;  // schemas holding participant_step, outbox, inbox
    std::string payments_schema;                   // the example's payment tables, if any
    std::chrono::seconds grace{60};                // an open saga's timer or an unpublished row may lag this much
};

struct AuditViolation {
    std::string saga_id;  // may be empty (an outbox row of no saga)
    std::string detail;
};

struct AuditCheck {
    std::string name;
    std::string rule;
    long long violations = 0;
    std::vector<AuditViolation> examples;  // the first few
};

struct AuditReport {
    long long sagas = 0;
    std::vector<AuditCheck> checks;
    // Participant records and payments naming a saga that is not stored, older than the shortest
    // history retention: of pruned sagas, or forgeries the audit can no longer tell apart (a warning).
    long long unmatched_old_records = 0;

    bool Ok() const;
    nlohmann::json ToJson() const;
    std::string Summary() const;  // one line per check, then the verdict
};

// Runs every check in one repeatable-read snapshot. Throws on a database error.
AuditReport AuditBlocking(const AuditOptions& options);

}  // namespace sagaflow
