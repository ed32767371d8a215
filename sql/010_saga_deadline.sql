-- A saga's deadline (the definition's `deadline:`): when it passes while the saga still runs before
-- its point of no return, the timer scan cancels it. The index holds only running sagas that have
-- one, so the scan's lookup stays small; status already changes only in updates that are not HOT
-- (the other partial indexes name it), and deadline_at is written once with the saga row, so this
-- costs saga updates nothing. Building it reads the table once under this migration's lock.
ALTER TABLE saga_instance ADD COLUMN deadline_at timestamptz NULL;
CREATE INDEX saga_instance_deadline ON saga_instance (deadline_at) WHERE status = 'running' AND deadline_at IS NOT NULL;
