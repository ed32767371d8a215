-- Where each message went: the relay writes the partition and offset from the broker's delivery
-- report with its publication mark, so the engine can tell whether a participant's consumer group
-- has read a command before it lets the step's timeout count. Both are NULL until published (and
-- again once re-armed for a resend). Neither is indexed: the mark stays a HOT-capable update.
ALTER TABLE outbox ADD COLUMN kafka_partition int NULL, ADD COLUMN kafka_offset bigint NULL;
-- When the engine first found an attempt's command still unread at its deadline (the timeline's
-- 'waiting-for-participant'); cleared with a 'started' entry once it has been read.
ALTER TABLE saga_step ADD COLUMN waiting_since timestamptz NULL;
-- The moment an attempt's timeout first fell due while the engine still had replies to read (the
-- second clock): the replies written before it must be read before the attempt may time out.
ALTER TABLE saga_step ADD COLUMN timeout_due_at timestamptz NULL;
