-- Dead letters, part 1 (issue 6): the `held` saga status, the release of a
-- held saga, and the complete dead-letter record.

-- A saga whose forward step was dead-lettered while worker.dead_letter_hold_ms
-- > 0 is `held`: nothing is compensated yet, so an operator can replay the
-- step (dlq-tool) before the hold timer starts the compensation.
ALTER TABLE sagas DROP CONSTRAINT sagas_status_check;
ALTER TABLE sagas ADD CONSTRAINT sagas_status_check
    CHECK (status IN ('running', 'held', 'completed', 'compensating', 'compensated', 'failed'));

-- Starts the compensation of a held saga now instead of when its hold ends:
-- the hold timer of the saga's current generation (a `saga.release`
-- command) becomes due at once.  Returns false when the saga is not held.
-- A held saga without such a timer has its release on the way already
-- (the relay moved it to the outbox): true, nothing to do.
CREATE FUNCTION sagad_release_hold(p_saga_id text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    gen integer;
BEGIN
    SELECT generation INTO gen FROM sagas
     WHERE saga_id = p_saga_id AND status = 'held' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE timers SET due_at = now()
     WHERE key = convert_to(p_saga_id, 'UTF8') AND headers->>'sagad-type' = 'saga.release'
       AND (convert_from(payload, 'UTF8')::jsonb->>'generation')::integer = gen
       AND due_at > now();
    RETURN true;
END $$;

-- The record on the DLQ topic (schemas/dead-letter.schema.json): as in 0003,
-- plus the payload's size and SHA-256 so a reader can check the bytes it
-- decodes are the original ones, and base64 without the line breaks
-- PostgreSQL's encode() puts every 76 characters.
CREATE OR REPLACE FUNCTION sagad_dead_letter_record(d dead_letters) RETURNS jsonb
LANGUAGE sql STABLE AS $$
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
                               THEN translate(encode(d.original_key, 'base64'), E'\n', '') END,
            'timestamp', d.original_timestamp, 'headers', d.original_headers),
        'first_failure_at', d.first_failure_at, 'last_failure_at', d.last_failure_at,
        'worker_id', d.worker_id, 'sagad_version', d.sagad_version, 'created_at', d.created_at,
        'payload', sagad_utf8(d.payload),
        'payload_base64', CASE WHEN sagad_utf8(d.payload) IS NULL
                               THEN translate(encode(d.payload, 'base64'), E'\n', '') END,
        'payload_bytes', octet_length(d.payload),
        'payload_sha256', encode(sha256(d.payload), 'hex'),
        'payload_omitted', false)
$$;

-- The DLQ topic message of a ledger row: the record, unless it would be
-- larger than p_max_bytes (limits.max_message_bytes, the size every sagad
-- message keeps to); then the payload stays in the ledger only and the
-- record says so (payload_omitted, with its size and SHA-256).
CREATE FUNCTION sagad_dead_letter_message(d dead_letters, p_max_bytes bigint) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN octet_length(r::text) <= p_max_bytes THEN r
                ELSE r || jsonb_build_object('payload', NULL, 'payload_base64', NULL,
                                             'payload_omitted', true) END
      FROM sagad_dead_letter_record(d) AS r
$$;
