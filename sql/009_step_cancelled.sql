-- A step phase in flight when its saga was cancelled is 'cancelled': like 'timed_out', its outcome
-- is unknown and it is compensated, but an operator reading the saga should not go looking for a
-- slow participant. The CHECK is replaced without a default or a rewrite; validating it reads the
-- table once under this migration's lock.
ALTER TABLE saga_step DROP CONSTRAINT saga_step_status_check;
ALTER TABLE saga_step ADD CONSTRAINT saga_step_status_check
    CHECK (status IN ('dispatched', 'succeeded', 'failed', 'timed_out', 'cancelled'));
