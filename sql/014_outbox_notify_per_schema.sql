-- Each schema's outbox notifies a channel of its own ("sagaflow_outbox_" and the md5 of the schema's
-- name: a channel name is at most 63 bytes). On the one shared channel every relay of the database
-- was woken by every insert into any schema's outbox, and PostgreSQL reads its notification queue in
-- a transaction of its own each time an idle listener is woken: with three relays (the engine and
-- the two sample participants), three transactions per inserting statement — about four of a saga's
-- seven. The payload stays "<schema>:<highest id inserted>".
CREATE OR REPLACE FUNCTION sagaflow_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    highest bigint;
BEGIN
    SELECT max(id) INTO highest FROM inserted;
    IF highest IS NOT NULL THEN
        PERFORM pg_notify('sagaflow_outbox_' || md5(TG_TABLE_SCHEMA), TG_TABLE_SCHEMA || ':' || highest);
    END IF;
    RETURN NULL;
END;
$$;
