-- The participant side (engine/participant.hpp): one row per (saga, step, phase) a participant
-- answered, with the reply it gave, so a repeated command gets the same reply again (the stored
-- reply's event id is re-armed in the outbox) and the effect is applied at most once.
--
-- A compensation that arrives before its action is recorded as done ('null_compensation') and
-- leaves a tombstone for the action ('refused'), so the late action is refused ("anti-hanging").
CREATE TABLE participant_step (
    saga_id           uuid        NOT NULL,
    step_name         text        NOT NULL,
    phase             text        NOT NULL CHECK (phase IN ('action', 'compensation')),
    command_type      text        NOT NULL,
    command_event_id  uuid        NULL,  -- null for a tombstone: the action never arrived
    status            text        NOT NULL
        CHECK (status IN ('succeeded', 'failed', 'refused', 'null_compensation')),
    reply             jsonb       NOT NULL,  -- the reply's data, outcome included
    reply_event_id    uuid        NULL,      -- null until a reply was enqueued
    applied_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (saga_id, step_name, phase)
);
