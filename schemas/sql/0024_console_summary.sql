-- The operator console's Now page (issue 38; GET /v1/summary): the steps
-- waiting for a person, counted and listed (GET /v1/approvals) without
-- reading every step of every saga.  Partial: only the few rows waiting.
CREATE INDEX IF NOT EXISTS steps_awaiting_approval ON steps (updated_at)
    WHERE status = 'awaiting_approval';
