-- sagaflow_lock_and_read_sagas (018) repeated the saga's columns, its input and data among them, on
-- every step phase's row: a reply to a saga's 40th step read its input and data 40 times over. Now
-- only a saga's first row carries them (the others have NULL there), and the rows of one saga come
-- in a total order (the phases one transaction dispatched share a dispatched_at), so "first" is the
-- same row for the window and for the reader. Same result type: replaced in place.
CREATE OR REPLACE FUNCTION sagaflow_lock_and_read_sagas(keys bigint[], ids uuid[])
RETURNS TABLE (saga_id text, saga_type text, definition_hash text, status text, current_step int,
               input text, data text, parked_reason text, traceparent text, tracestate text,
               step_name text, phase text, step_status text, attempt int, reply text,
               awaiting_retry boolean, command_event_id text, dispatch_age float8)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(k) FROM unnest(keys) AS k;
    RETURN QUERY
    SELECT i.saga_id::text, i.saga_type, i.definition_hash, i.status, i.current_step,
           CASE WHEN row_number() OVER w = 1 THEN i.input::text END,
           CASE WHEN row_number() OVER w = 1 THEN i.data::text END,
           coalesce(i.parked_reason, ''), coalesce(i.traceparent, ''), coalesce(i.tracestate, ''),
           s.step_name, s.phase, s.status, s.attempt, s.reply::text, s.next_attempt_at IS NOT NULL,
           s.command_event_id::text, extract(epoch FROM clock_timestamp() - s.dispatched_at)::float8
    FROM saga_instance i LEFT JOIN saga_step s ON s.saga_id = i.saga_id
    WHERE i.saga_id = ANY (ids)
    WINDOW w AS (PARTITION BY i.saga_id ORDER BY s.dispatched_at, s.phase, s.step_name)
    ORDER BY i.saga_id, s.dispatched_at, s.phase, s.step_name;
END
$$;
