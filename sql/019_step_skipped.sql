-- A step whose `when:` condition was false is recorded as 'skipped': a step row without a command
-- (its command_event_id is minted and never sent), so its dependants, the timeline and a saga's
-- view see it done. Instances started before steps could be skipped have no such row and carry on
-- unchanged. The CHECK is replaced without a default or a rewrite.
ALTER TABLE saga_step DROP CONSTRAINT saga_step_status_check;
ALTER TABLE saga_step ADD CONSTRAINT saga_step_status_check
    CHECK (status IN ('dispatched', 'succeeded', 'failed', 'timed_out', 'cancelled', 'skipped'));
