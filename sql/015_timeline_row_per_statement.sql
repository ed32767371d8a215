-- Half the timeline's rows. The entries one statement writes for a saga go in one row: a reply and
-- the next step's dispatch, a start and its first dispatch, the last reply and the finish. The
-- first entry keeps the row's columns; the ones written after it, in order, go in `later`, a JSON
-- array of objects with the columns' names (kind, step_name, phase, attempt, event_id, detail).
-- Every row took two WAL records (the heap insert and its saga_event_saga entry): 16 of a sample
-- saga's, now 8. Rows of older engines (one entry each) read the same. Entries without a saga
-- (ignored replies for unknown sagas) keep a row each.
ALTER TABLE saga_event ADD COLUMN later jsonb NULL;

-- The timeline one entry per row, in order (`ORDER BY id, seq`); what every reader queries.
CREATE VIEW saga_timeline AS
    SELECT e.id, 0::bigint AS seq, e.saga_id, e.at, e.kind, e.step_name, e.phase, e.attempt, e.event_id, e.detail
    FROM saga_event e
    UNION ALL
    SELECT e.id, x.seq, e.saga_id, e.at, x.entry->>'kind', x.entry->>'step_name', x.entry->>'phase',
           (x.entry->>'attempt')::int, (x.entry->>'event_id')::uuid, coalesce(x.entry->'detail', '{}')
    FROM saga_event e CROSS JOIN LATERAL jsonb_array_elements(e.later) WITH ORDINALITY AS x(entry, seq)
    WHERE e.later IS NOT NULL;
