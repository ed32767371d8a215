-- Rows whose publishing failed wait (next_attempt_at) and hold back the later rows of their key,
-- so per-key order survives a failed produce. This small partial index finds them.
CREATE INDEX outbox_backing_off ON outbox (message_key, id)
    WHERE published_at IS NULL AND next_attempt_at IS NOT NULL;
