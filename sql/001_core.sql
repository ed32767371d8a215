-- sagaflow core schema: saga state, step dispatch dedup, transactional outbox, inbox, HTTP
-- idempotency records. Applied once, in its own transaction, by the migration runner.

-- Every definition an instance may be pinned to, by hash, so a restarted engine can resume an
-- instance on the exact definition it started with after a newer version was registered.
CREATE TABLE saga_definition (
    saga_type      text        NOT NULL,
    version        int         NOT NULL,
    hash           text        NOT NULL,
    canonical      jsonb       NOT NULL,
    registered_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_type, hash)
);

CREATE TABLE saga_instance (
    saga_id             uuid        PRIMARY KEY,
    saga_type           text        NOT NULL,
    definition_version  int         NOT NULL,
    definition_hash     text        NOT NULL,
    status              text        NOT NULL
        CHECK (status IN ('running', 'compensating', 'completed', 'compensated', 'failed')),
    current_step        int         NOT NULL DEFAULT 0,
    input               jsonb       NOT NULL,
    data                jsonb       NOT NULL DEFAULT '{}',
    idempotency_key     text        NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    version             bigint      NOT NULL DEFAULT 0,
    -- Keys are scoped per saga type: two types may use the same client key.
    UNIQUE (saga_type, idempotency_key),
    FOREIGN KEY (saga_type, definition_hash) REFERENCES saga_definition (saga_type, hash)
);
-- Recovery and operators look for sagas that are not terminal.
CREATE INDEX saga_instance_active ON saga_instance (updated_at)
    WHERE status IN ('running', 'compensating');
CREATE INDEX saga_instance_type_status ON saga_instance (saga_type, status, created_at);

-- One row per (saga, step, phase): dispatch is INSERT ... ON CONFLICT DO NOTHING, so a step or
-- its compensation is never dispatched twice. The command event id is minted once per row and
-- reused on every resend.
CREATE TABLE saga_step (
    saga_id           uuid        NOT NULL REFERENCES saga_instance (saga_id) ON DELETE CASCADE,
    step_name         text        NOT NULL,
    phase             text        NOT NULL CHECK (phase IN ('action', 'compensation')),
    status            text        NOT NULL
        CHECK (status IN ('dispatched', 'succeeded', 'failed', 'timed_out')),
    attempt           int         NOT NULL DEFAULT 1,
    command_event_id  uuid        NOT NULL UNIQUE,
    reply             jsonb       NULL,
    next_attempt_at   timestamptz NULL,
    deadline_at       timestamptz NULL,
    dispatched_at     timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz NULL,
    PRIMARY KEY (saga_id, step_name, phase)
);
-- Durable timers: steps waiting for a reply (deadline) or for their next attempt.
CREATE INDEX saga_step_deadline ON saga_step (deadline_at) WHERE status = 'dispatched';
CREATE INDEX saga_step_next_attempt ON saga_step (next_attempt_at) WHERE next_attempt_at IS NOT NULL;

-- Transactional outbox: written in the business transaction, published by the relay.
CREATE TABLE outbox (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id         uuid        NOT NULL UNIQUE,
    topic            text        NOT NULL,
    message_key      text        NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{}',
    payload          jsonb       NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    published_at     timestamptz NULL,
    attempts         int         NOT NULL DEFAULT 0,
    last_error       text        NULL,
    next_attempt_at  timestamptz NULL
);
-- The relay claims unpublished rows in id order; the partial index stays small.
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Wake the relay when rows commit. Statement level: one notification per inserting statement,
-- and PostgreSQL folds identical notifications of one transaction into one.
CREATE FUNCTION sagaflow_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sagaflow_outbox', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION sagaflow_outbox_notify();

-- Inbox: the ids a consumer has processed, written in the same transaction as the effect.
CREATE TABLE processed_event (
    consumer_name  text        NOT NULL,
    event_id       uuid        NOT NULL,
    processed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, event_id)
);
CREATE INDEX processed_event_processed_at ON processed_event (processed_at);

-- HTTP Idempotency-Key records (rule R-DIST-IDEM-3): the command hash and the stored response.
CREATE TABLE idempotency_record (
    scope            text        NOT NULL,
    idempotency_key  text        NOT NULL,
    command_hash     text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('in_progress', 'completed')),
    http_status      int         NULL,
    response         jsonb       NULL,
    saga_id          uuid        NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (scope, idempotency_key)
);
CREATE INDEX idempotency_record_expires_at ON idempotency_record (expires_at);
