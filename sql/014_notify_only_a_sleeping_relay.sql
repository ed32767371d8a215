-- A commit that adds outbox rows notifies the relay only while the relay sleeps. PostgreSQL signals
-- every listening session of a database at every NOTIFY, whatever the channel, and each signalled
-- session reads the notification queue in a transaction of its own: with the three schemas of the
-- sample in one database, a saga's notifying commits cost about 2.6 such transactions. A busy
-- relay needs no notification: it claims again as soon as a batch is delivered.
--
-- The relay holds the wake lock (advisory lock 0x7366776b "sfwk", the schema's hashtext) in
-- exclusive mode exactly while it may sleep. Each inserting statement tries the lock in shared
-- mode, held to the end of its transaction: when that fails, the relay sleeps (or is about to) and
-- the commit notifies. When it succeeds, the relay is awake, and it cannot take the wake lock
-- before this transaction ends: it takes the lock, and only then claims once more (a snapshot
-- that sees this commit) before it sleeps. No row can commit unseen and unannounced.
CREATE OR REPLACE FUNCTION sagaflow_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    highest bigint;
BEGIN
    SELECT max(id) INTO highest FROM inserted;
    IF highest IS NOT NULL AND NOT pg_try_advisory_xact_lock_shared(1936095083, hashtext(TG_TABLE_SCHEMA)) THEN
        PERFORM pg_notify('sagaflow_outbox', TG_TABLE_SCHEMA || ':' || highest);
    END IF;
    RETURN NULL;
END;
$$;
