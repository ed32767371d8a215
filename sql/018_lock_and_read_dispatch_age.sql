-- sagaflow_lock_and_read_sagas (017) also gives each step phase's age: the seconds since its
-- dispatch, at the read. The engine measures a step's latency from it (sagaflow_step_latency_seconds)
-- instead of from a RETURNING of its write, so that write can go out with the COMMIT in one round
-- trip, its rows unread. A new column changes the function's result type: dropped and created again.
DROP FUNCTION sagaflow_lock_and_read_sagas(bigint[], uuid[]);
CREATE FUNCTION sagaflow_lock_and_read_sagas(keys bigint[], ids uuid[])
RETURNS TABLE (saga_id text, saga_type text, definition_hash text, status text, current_step int,
               input text, data text, parked_reason text, traceparent text, tracestate text,
               step_name text, phase text, step_status text, attempt int, reply text,
               awaiting_retry boolean, command_event_id text, dispatch_age float8)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(k) FROM unnest(keys) AS k;
    RETURN QUERY
    SELECT i.saga_id::text, i.saga_type, i.definition_hash, i.status, i.current_step, i.input::text,
           i.data::text, coalesce(i.parked_reason, ''), coalesce(i.traceparent, ''),
           coalesce(i.tracestate, ''), s.step_name, s.phase, s.status, s.attempt, s.reply::text,
           s.next_attempt_at IS NOT NULL, s.command_event_id::text,
           extract(epoch FROM clock_timestamp() - s.dispatched_at)::float8
    FROM saga_instance i LEFT JOIN saga_step s ON s.saga_id = i.saga_id
    WHERE i.saga_id = ANY (ids)
    ORDER BY i.saga_id, s.dispatched_at, s.phase;
END
$$;
