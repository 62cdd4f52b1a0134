-- A dead letter keeps the saga's steps as they stood when it was written
-- (issue 35 item 7): `dlq-tool show` read only the saga's present state,
-- which a replay, a later compensation or a cancel has changed since, so
-- the operator could not see what had completed at the time of the
-- failure.  steps_at is written by the worker in the dead letter's own
-- statement (the decision's step rows are written first, so it sees
-- them); NULL for a dead letter of no saga, and for those written before
-- this migration.
ALTER TABLE dead_letters ADD COLUMN steps_at jsonb;

-- The DLQ record of 0014, plus steps_at.
ALTER FUNCTION sagad_dead_letter_record(dead_letters) RENAME TO sagad_dead_letter_record_0014;
CREATE FUNCTION sagad_dead_letter_record(d dead_letters) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT sagad_dead_letter_record_0014(d) || jsonb_build_object('steps_at', d.steps_at)
$$;
