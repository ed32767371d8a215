-- Publishing a row now changes no indexed column, so PostgreSQL writes the relay's mark in place
-- (a HOT update: one WAL record) instead of a new row version with an entry in every index of the
-- table. Three indexes named `published_at` (outbox_unpublished, outbox_published_at and outbox_held,
-- by their predicates or keys), so every mark inserted three or four index entries: with the
-- insert's, about ten WAL records per outbox row, a third of a saga's.
--
-- What those indexes found is now kept in two small places:
-- * `outbox_relay.low_water`: every row with a lower id is published or listed in outbox_retry. The
--   relay claims rows after its position through the primary key and moves low_water forward as it
--   goes (at most once a second); a new relay session's first claim starts there.
-- * `outbox_retry`: the rows taken before and unpublished again — re-armed for a resend, or backing
--   off after a failed produce. A row of it holds back the later rows of its key (the role of
--   outbox_held). The trigger below lists a row whenever an update leaves it unpublished and due
--   again, so `outbox::Rearm`, the relay's failure mark and a participant's own re-arm statement
--   (docs/protocol.md) all keep working unchanged; the relay's mark takes it off the list.
-- The TTL sweeper walks the primary key from the oldest row instead of outbox_published_at, and
-- the backlog gauge reads the rows from low_water on plus the list.
CREATE TABLE outbox_relay (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    low_water  bigint  NOT NULL
);
CREATE TABLE outbox_retry (
    id           bigint PRIMARY KEY,
    message_key  text   NOT NULL
);
CREATE INDEX outbox_retry_key ON outbox_retry (message_key, id);

INSERT INTO outbox_retry (id, message_key)
    SELECT id, message_key FROM outbox
    WHERE published_at IS NULL AND (next_attempt_at IS NOT NULL OR attempts > 0);
INSERT INTO outbox_relay (low_water)
    SELECT coalesce((SELECT min(id) FROM outbox WHERE published_at IS NULL AND next_attempt_at IS NULL AND attempts = 0),
                    (SELECT coalesce(max(id), 0) + 1 FROM outbox));

CREATE FUNCTION sagaflow_outbox_retry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_retry (id, message_key) VALUES (NEW.id, NEW.message_key) ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_retry AFTER UPDATE ON outbox FOR EACH ROW
    WHEN (NEW.published_at IS NULL AND (OLD.published_at IS NOT NULL OR NEW.next_attempt_at IS NOT NULL))
    EXECUTE FUNCTION sagaflow_outbox_retry();

DROP INDEX outbox_unpublished;
DROP INDEX outbox_published_at;
DROP INDEX outbox_held;
-- Each row is updated once, by its mark: half of every page stays free for the new versions.
ALTER TABLE outbox SET (fillfactor = 50);
