-- A commit whose relay runs in the writer's own process wakes it there, not through NOTIFY.
-- PostgreSQL signals every listening session of a database at every NOTIFY, and each reads the
-- queue in a transaction of its own: with three schemas in one database, the commits of a saga
-- that found their relay asleep cost about two such transactions, and up to three in some runs.
--
-- A sagaflow process sets `sagaflow.wake_token` on its pool's sessions (a number from 1 to
-- 999,999,999 of its own); its relay, leading a schema's outbox, takes the session advisory lock
-- (token, hashtext(schema)) when it first sleeps and keeps it; after every pool job the process
-- wakes its relay in memory. A statement that inserts rows while the relay sleeps (the wake lock
-- is taken, 014) tries that lock shared:
-- when it fails, the sleeping relay is its own process's and will be woken after the commit, so
-- no notification is sent. Every other writer (no token, another process's token, a foreign
-- participant's SQL) notifies as before. Should the leader change between the statement and the
-- commit, the new leader finds the rows at its next poll (the relay's poll interval).
CREATE OR REPLACE FUNCTION sagaflow_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    highest bigint;
    token text;
BEGIN
    SELECT max(id) INTO highest FROM inserted;
    IF highest IS NOT NULL AND NOT pg_try_advisory_xact_lock_shared(1936095083, hashtext(TG_TABLE_SCHEMA)) THEN
        token := current_setting('sagaflow.wake_token', true);
        IF token IS NULL OR token !~ '^[0-9]{1,9}$'
           OR pg_try_advisory_xact_lock_shared(token::integer, hashtext(TG_TABLE_SCHEMA)) THEN
            PERFORM pg_notify('sagaflow_outbox', TG_TABLE_SCHEMA || ':' || highest);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;
