-- The notification now says which outbox and how far: "<schema>:<highest id inserted>". Every relay
-- of a database listens on one channel, so with an empty payload each relay woke and claimed for
-- every insert into any schema's outbox, and again for rows its previous claim had already taken:
-- measured, about half the relays' claims found nothing. A relay now claims only when a
-- notification of its own schema names an id above the highest it has claimed.
CREATE OR REPLACE FUNCTION sagaflow_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    highest bigint;
BEGIN
    SELECT max(id) INTO highest FROM inserted;
    IF highest IS NOT NULL THEN
        PERFORM pg_notify('sagaflow_outbox', TG_TABLE_SCHEMA || ':' || highest);
    END IF;
    RETURN NULL;
END;
$$;
DROP TRIGGER outbox_notify ON outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION sagaflow_outbox_notify();
