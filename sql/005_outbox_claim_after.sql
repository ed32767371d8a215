-- The relay claims rows after its position (the ids it has published) instead of scanning from the
-- first unpublished one: under load that scan walked the index entries of every row published since
-- the last vacuum, about 0.7-1 ms and 500-700 buffers per claim, the most expensive statement of a
-- saga. A row below the position (it committed late, or was re-armed) holds back the later rows of
-- its key until a full claim publishes it; this index finds such rows by key.
CREATE INDEX outbox_unpublished_key ON outbox (message_key, id) WHERE published_at IS NULL;
