#include "engine/orchestrator/timers.hpp"

#include <spdlog/spdlog.h>

#include <pqxx/pqxx>

#include "core/detail/yaml_reader.hpp"
#include "core/saga_machine.hpp"
#include "store/inbox.hpp"
#include "store/prepared.hpp"

namespace sagaflow::detail {

std::chrono::milliseconds TimerService::Scan(pqxx::connection& conn, const std::atomic<bool>& running) {
    try {
        while (running.load()) {
            std::vector<DueTimer> due;
            {
                pqxx::read_transaction tx{conn};
                due = DueTimers(tx, 100);
            }
            int fired = 0;
            for (const auto& timer : due) {
                if (!running.load()) return sagas_.Config().timer_max_sleep;  // stopping: the rest stay due
                fired += Fire(conn, timer) ? 1 : 0;
            }
            if (due.size() < 100 || fired == 0) break;
        }
        pqxx::read_transaction tx{conn};
        return NextTimer(tx).value_or(sagas_.Config().timer_max_sleep);
    } catch (const pqxx::broken_connection&) {
        throw;  // the timer loop logs it; the pool reconnects for the next scan
    } catch (const std::exception& e) {
        if (const auto unlogged = timer_failures_.Due()) {
            spdlog::warn("engine {}: timer scan failed, retrying every {} ms: {}{}",
                         sagas_.Config().instance_id,
                         sagas_.Config().timer_max_sleep.count(),
                         store::ExplainDatabaseError(e),
                         *unlogged == 0 ? "" : fmt::format(" ({} failures since the last line)", *unlogged));
        }
        return sagas_.Config().timer_max_sleep;
    }
}

bool TimerService::Fire(pqxx::connection& conn, const DueTimer& timer) {
    pqxx::work tx{conn};
    auto saga = LockSaga(tx, timer.saga_id, LockMode::kSkipLocked);
    if (!saga) return false;
    const auto definition = sagas_.Definitions().Find(tx, saga->saga_type, saga->definition_hash);
    if (timer.saga_deadline) return FireDeadline(tx, *definition, *saga);
    if (!timer.retry && HoldTimeout(tx, *definition, *saga, timer)) {
        tx.commit();
        return true;
    }
    machine::Event event = machine::Timeout{timer.step_name, timer.phase, timer.attempt};
    if (timer.retry) event = machine::RetryDue{timer.step_name, timer.phase, timer.attempt + 1};
    const auto decision = machine::Decide(*definition, saga->state, event, saga->input);
    if (decision.ignored) return false;  // another engine fired it first
    std::vector<TimelineRow> timeline;
    if (!timer.retry) {
        timeline.push_back(
            {"timeout", timer.step_name, std::string(machine::ToString(timer.phase)), timer.attempt, {}, {}});
    }
    SideEffects side;
    sagas_.Persist(&tx, *definition, *saga, decision, side, std::move(timeline));
    tx.commit();
    sagas_.Apply(std::move(side));
    ++sagas_.Count().timers_fired;
    return true;
}

// The two clocks of a step timeout. An attempt's `timeout` counts only time its participant
// could have used: from when the participant's consumer group read the command (the relay
// recorded its partition and offset; the group's committed offsets say whether it is past
// it), and only once the engine's own group has read every reply written before the deadline
// (so a reply waiting in an unassigned or lagging partition is read, not timed out). While the
// command waits to be read the attempt waits too, up to the step's startTimeout from its
// dispatch; past that, or when Kafka cannot say (a group that commits nothing on the topic),
// the timeout fires as before. Returns true when the timer was moved (the caller commits).
bool TimerService::HoldTimeout(pqxx::work& tx,
                               const SagaDefinition& definition,
                               const LoadedSaga& saga,
                               const DueTimer& timer) {
    if (progress_.load() == nullptr) return false;
    const StepDefinition* step = definition.FindStep(timer.step_name);
    if (step == nullptr) return false;
    const std::string phase(machine::ToString(timer.phase));
    const auto clock = ReadStepClock(tx, saga.saga_id, timer.step_name, phase, timer.attempt, step->timeout);
    if (!clock) return false;
    const auto since_dispatch = clock->since_dispatch;
    const auto overdue = clock->overdue;
    const bool waiting = clock->waiting;
    if (since_dispatch >= step->StartTimeout()) return false;  // waited long enough: time out
    const std::string group = sagas_.ParticipantGroup(step->participant);
    const auto move = [&](std::chrono::milliseconds delay, StepHold hold) {
        MoveStepDeadline(tx, saga.saga_id, timer.step_name, phase, delay, step->timeout, hold);
    };
    // Clock 1: has the participant read the command?
    std::string unread;
    std::optional<std::chrono::milliseconds> read_ago;
    bool not_looked_yet = false;  // a follower that just started: ask again shortly
    if (!clock->published) {
        unread = "its command is not published yet";
    } else if (clock->partition) {
        const std::string& topic = clock->topic;
        // A definition registered after Start: followed from now on, as far back as this step needs.
        progress_.load()->Follow(group, topic, false, step->timeout);
        const auto answer = progress_.load()->CommandRead(group, topic, *clock->partition, clock->offset);
        if (answer.read == outbox::GroupProgress::Read::kNo) {
            unread = "its command waits to be read by consumer group " + group;
        } else if (answer.read == outbox::GroupProgress::Read::kYes) {
            read_ago = answer.ago;
        } else if (answer.read == outbox::GroupProgress::Read::kNotYet) {
            not_looked_yet = true;
        } else if (const auto unlogged = unknown_progress_.Due()) {
            spdlog::warn("engine {}: step timeouts of participant {} count from dispatch: {}{}",
                         sagas_.Config().instance_id,
                         step->participant,
                         answer.why,
                         *unlogged == 0 ? "" : fmt::format(" ({} more since the last line)", *unlogged));
        }
    }
    if (not_looked_yet) {
        move(std::chrono::milliseconds(500), StepHold::kWaitForReplies);
        return true;
    }
    if (!unread.empty()) {
        constexpr std::chrono::milliseconds kLookAgain{1000};
        move(kLookAgain, StepHold::kWaitForRead);
        if (!waiting) {
            RecordEvents(tx,
                         saga.saga_id,
                         {{"waiting-for-participant",
                           timer.step_name,
                           phase,
                           timer.attempt,
                           {},
                           {{"reason", unread}, {"startTimeoutMs", step->StartTimeout().count()}}}});
        }
        return true;
    }
    if (waiting) {
        // Read at last: the timeout counts from then.
        const auto ago = read_ago.value_or(std::chrono::milliseconds(0));
        const auto rest = std::max(step->timeout - ago, std::chrono::milliseconds(0));
        move(rest, StepHold::kRestart);
        RecordEvents(
            tx, saga.saga_id, {{"started", timer.step_name, phase, timer.attempt, {}, {{"readMsAgo", ago.count()}}}});
        if (rest.count() > 0) return true;
    } else if (read_ago && *read_ago < step->timeout) {
        move(step->timeout - *read_ago, StepHold::kRestart);  // read late: its full timeout from the read
        return true;
    }
    // Clock 2: every reply written before the deadline read by this engine's group?
    // Bounded by startTimeout from the command's publication, which moving the timer leaves be;
    // when Kafka cannot say (nullopt) the timeout fires as before.
    const auto caught_up = progress_.load()->CaughtUpAgo(sagas_.Config().consumer_group, sagas_.Config().replies_topic);
    const bool can_wait = clock->published_ago && *clock->published_ago < step->StartTimeout();
    if (can_wait && caught_up && *caught_up > overdue) {
        move(std::chrono::milliseconds(500), StepHold::kWaitForReplies);
        return true;
    }
    return false;
}

// The saga's own deadline passed while it runs: cancelled if it is still before its point of no
// return; otherwise the deadline no longer applies and is cleared. Either way the timeline says so.
bool TimerService::FireDeadline(pqxx::work& tx, const SagaDefinition& definition, const LoadedSaga& saga) {
    const std::string reason = "its deadline of " + FormatDuration(*definition.deadline) + " passed";
    const auto cancellation = commands_.CancelLocked(tx, definition, saga, reason);
    if (!cancellation.refused.empty()) {
        ClearSagaDeadline(tx, saga.saga_id);
        RecordEvents(tx, saga.saga_id, {{"deadline-passed", {}, {}, 0, {}, {{"ignored", cancellation.refused}}}});
    }
    tx.commit();
    if (cancellation.refused.empty()) {
        sagas_.Apply(std::move(cancellation.side));
        commands_.Cancelled(saga.saga_id, reason);
    }
    return true;
}

}  // namespace sagaflow::detail
