-- A saga row is updated on every transition (four times in the sample saga). PostgreSQL writes an
-- update in place of the old version (a HOT update: no new index entries) only when no indexed
-- column changes and the page has room. `updated_at` changes on every update and two partial
-- indexes were keyed on it, so each update inserted a new entry into all five indexes of the table
-- (measured: 0 of 168,108 updates HOT in a benchmark run). No query orders or filters by those
-- keys: the non-terminal and the parked sagas are now indexed by saga id (UUID v7 ids sort by
-- creation, and the saga listing pages by id), and each page keeps a quarter free for the new
-- versions of its rows. Building the two indexes reads the table once, under this migration's lock.
DROP INDEX saga_instance_active;
CREATE INDEX saga_instance_active ON saga_instance (saga_id) WHERE status IN ('running', 'compensating');
DROP INDEX saga_instance_parked;
CREATE INDEX saga_instance_parked ON saga_instance (saga_id) WHERE status = 'failed';
ALTER TABLE saga_instance SET (fillfactor = 75);
