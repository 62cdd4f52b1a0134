-- sagad-worker: compensation attempt counter, trace context, partition
-- fencing, the dead-letter record, and the ledger of the builtin `ledger`
-- tool.

-- Attempts of the compensation of a step, counted apart from the forward
-- attempts (their limits differ).
ALTER TABLE steps ADD COLUMN comp_attempts integer NOT NULL DEFAULT 0;

-- W3C traceparent of the submission, carried on every message of the saga.
ALTER TABLE sagas ADD COLUMN traceparent text;

-- Fencing: every worker transaction ends by moving the partition's offset
-- through this function with the owner epoch it got on assignment.  If
-- another worker took the partition since (a higher epoch), it raises
-- SQLSTATE SGF01 and the whole transaction rolls back: a zombie cannot
-- commit.  The offset never moves backwards.
CREATE FUNCTION sagad_fence(p_group text, p_topic text, p_partition integer, p_epoch bigint,
                            p_next bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE consumer_offsets
       SET next_offset = GREATEST(next_offset, p_next), updated_at = now()
     WHERE group_id = p_group AND topic = p_topic AND partition = p_partition
       AND owner_epoch = p_epoch;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'partition %[%] of group % is owned by another worker (epoch % is stale)',
            p_topic, p_partition, p_group, p_epoch USING ERRCODE = 'SGF01';
    END IF;
END $$;

-- bytea as text when it is valid UTF-8, NULL otherwise.
CREATE FUNCTION sagad_utf8(b bytea) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN convert_from(b, 'UTF8');
EXCEPTION WHEN character_not_in_repertoire OR untranslatable_character THEN
    RETURN NULL;
END $$;

-- The dead-letter record as published on the DLQ topic (schemas/
-- dead-letter.schema.json): the ledger row, with the original payload as
-- text when it is UTF-8 and as base64 otherwise.
CREATE FUNCTION sagad_dead_letter_record(d dead_letters) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'v', 1, 'type', 'dead_letter', 'id', d.id, 'status', d.status,
        'error_code', d.error_code, 'error_class', d.error_class, 'message', d.message,
        'saga_id', d.saga_id, 'saga_name', d.saga_name, 'step', d.step_idx,
        'step_name', d.step_name, 'tool', d.tool, 'phase', d.phase, 'attempts', d.attempts,
        'trail', d.trail,
        'original', jsonb_build_object(
            'topic', d.original_topic, 'partition', d.original_partition,
            'offset', d.original_offset,
            'key', sagad_utf8(d.original_key),
            'key_base64', CASE WHEN sagad_utf8(d.original_key) IS NULL
                               THEN encode(d.original_key, 'base64') END,
            'timestamp', d.original_timestamp, 'headers', d.original_headers),
        'first_failure_at', d.first_failure_at, 'last_failure_at', d.last_failure_at,
        'worker_id', d.worker_id, 'sagad_version', d.sagad_version, 'created_at', d.created_at,
        'payload', sagad_utf8(d.payload),
        'payload_base64', CASE WHEN sagad_utf8(d.payload) IS NULL
                               THEN encode(d.payload, 'base64') END)
$$;

-- Effects of the builtin `ledger` tool: one row per idempotency key, and
-- how many times it was called with that key.  Tests count effects here.
CREATE TABLE builtin_ledger (
    key        text PRIMARY KEY,
    calls      integer NOT NULL DEFAULT 1,
    args       jsonb,
    first_at   timestamptz NOT NULL DEFAULT now(),
    last_at    timestamptz NOT NULL DEFAULT now()
);
