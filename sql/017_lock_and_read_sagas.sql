-- A batch of sagas locked and read with one statement: the advisory locks of `keys` (the sagas' lock
-- keys in ascending order, so that two engines locking overlapping batches cannot deadlock; none to
-- only read), then the sagas `ids` with their step phases: a row per phase, the saga's columns on
-- each, one row with no phase for a saga that has none.
--
-- A function because each query of a VOLATILE function takes a fresh snapshot (READ COMMITTED): the
-- read, after the locks, sees the commit of the transaction that held them last, which a read in the
-- statement that waited for them would not. So the engine's reply consumer can lock and read a
-- batch's sagas inside its inbox statement: one round trip per reply batch for all three.
CREATE FUNCTION sagaflow_lock_and_read_sagas(keys bigint[], ids uuid[])
RETURNS TABLE (saga_id text, saga_type text, definition_hash text, status text, current_step int,
               input text, data text, parked_reason text, traceparent text, tracestate text,
               step_name text, phase text, step_status text, attempt int, reply text,
               awaiting_retry boolean, command_event_id text)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(k) FROM unnest(keys) AS k;
    RETURN QUERY
    SELECT i.saga_id::text, i.saga_type, i.definition_hash, i.status, i.current_step, i.input::text,
           i.data::text, coalesce(i.parked_reason, ''), coalesce(i.traceparent, ''),
           coalesce(i.tracestate, ''), s.step_name, s.phase, s.status, s.attempt, s.reply::text,
           s.next_attempt_at IS NOT NULL, s.command_event_id::text
    FROM saga_instance i LEFT JOIN saga_step s ON s.saga_id = i.saga_id
    WHERE i.saga_id = ANY (ids)
    ORDER BY i.saga_id, s.dispatched_at, s.phase;
END
$$;
