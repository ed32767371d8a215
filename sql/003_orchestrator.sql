-- The orchestrator's additions: the definition's source (so any engine instance can resume a saga
-- on the exact version it started with, even one it never registered itself), one version per
-- content, why a saga was parked, and the saga timeline.

ALTER TABLE saga_definition ADD COLUMN source text NOT NULL DEFAULT '';
-- A version number names one content: editing a saga without bumping `version` is refused.
ALTER TABLE saga_definition ADD CONSTRAINT saga_definition_one_content_per_version
    UNIQUE (saga_type, version);

ALTER TABLE saga_instance ADD COLUMN parked_reason text NULL;
CREATE INDEX saga_instance_parked ON saga_instance (updated_at) WHERE status = 'failed';

-- Everything that happened to a saga, in order: started, dispatched, resent, reply, timeout,
-- retry-scheduled, finished, and events that were recorded but ignored (duplicates of an answered
-- step, stale attempts, replies for unknown sagas). No foreign key: a reply for an unknown saga is
-- recorded too.
CREATE TABLE saga_event (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    saga_id     uuid        NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind        text        NOT NULL,
    step_name   text        NULL,
    phase       text        NULL,
    attempt     int         NULL,
    event_id    uuid        NULL,
    detail      jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX saga_event_saga ON saga_event (saga_id, id);
