-- Fewer WAL records per saga, with no query left without its index.
--
-- * The timeline's `id` needs no index of its own: a saga's entries are read and deleted through
--   saga_event_saga (saga_id, id), and the retention of entries without a saga deletes by row
--   address. Every entry (eight in the sample saga) inserted an entry into the primary key too.
-- * The TTL sweeper finds old inbox rows by `processed_at`, which only grows: a BRIN index answers
--   that range as well and costs an insert nothing (a new row's page range is summarised later, by
--   vacuum), where the B-tree took an entry and a WAL record per processed event.
-- * A saga row no longer references its definition row by foreign key: the check took a share lock
--   on the definition row at every start (a WAL record, and a MultiXact once two starts of a type
--   overlapped, which they always do under load). The engine stores a definition before any saga
--   pinned to it, in the same transaction or an earlier one, and never deletes one; `sagaflow audit`
--   checks that every saga's definition is there.
ALTER TABLE saga_event DROP CONSTRAINT saga_event_pkey;
DROP INDEX processed_event_processed_at;
CREATE INDEX processed_event_processed_at ON processed_event USING brin (processed_at);
ALTER TABLE saga_instance DROP CONSTRAINT saga_instance_saga_type_definition_hash_fkey;
-- * A step row no longer references its saga by foreign key: with the saga's lock an advisory lock
--   (engine/repository/saga_store.hpp), the check share-locked the saga row at every dispatch, a WAL
--   record each. Steps are written only by a transaction that holds their saga's lock, and deleted
--   with it by the retention; `sagaflow audit` checks that no step lacks its saga.
-- * `saga_step.command_event_id` is no longer indexed: every lookup of a step goes by its primary key
--   (the TTL sweeper finds a command's step by the saga id, step and phase the command names), and
--   the id is minted once per step phase (UUID v7). The unique index took an entry at the dispatch
--   and another at the reply, whose update is never HOT.
ALTER TABLE saga_step DROP CONSTRAINT saga_step_saga_id_fkey;
ALTER TABLE saga_step DROP CONSTRAINT saga_step_command_event_id_key;
