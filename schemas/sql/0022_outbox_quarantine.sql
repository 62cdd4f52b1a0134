-- Rows the broker refuses for good go aside (issue 36 item 4).
--
-- The relay publishes a shard's rows in order and moves its cursor only
-- past rows Kafka acknowledged.  A row Kafka will never take (larger than
-- the producer's message.max.bytes or the topic's max.message.bytes, a
-- record the broker calls invalid) was sent again for ever and held every
-- later row of its shard back.  Now the relay copies such a row here,
-- with the broker's error, and moves on (docs/RELAY.md, "Rows the broker
-- refuses").  The operator re-publishes it (after raising the limit, say)
-- or drops it, through the two functions below.
CREATE TABLE outbox_quarantine (
    outbox_id        bigint PRIMARY KEY,          -- the row's id in the outbox
    tx               xid8 NOT NULL,
    shard            integer NOT NULL,
    topic            text NOT NULL,
    key              bytea,
    headers          jsonb NOT NULL,
    payload          bytea NOT NULL,
    created_at       timestamptz NOT NULL,        -- when the writer inserted it
    error_code       text NOT NULL,               -- kafka.msg_size_too_large, ...
    error            text NOT NULL,               -- the broker's (or librdkafka's) words
    quarantined_at   timestamptz NOT NULL DEFAULT now(),
    holder           text,                        -- the relay that moved it aside
    status           text NOT NULL DEFAULT 'quarantined'
                     CHECK (status IN ('quarantined', 'republished', 'dropped')),
    resolved_at      timestamptz,
    resolved_by      text,                        -- the operator's name
    resolved_session_user text,
    republished_id   bigint                       -- the new outbox row
);
CREATE INDEX outbox_quarantine_waiting ON outbox_quarantine (quarantined_at)
    WHERE status = 'quarantined';

-- Publishes a quarantined row again: a new outbox row with the same
-- topic, key, headers and payload (the same message id inside, so a
-- consumer that saw it drops the copy), at the end of its key's order.
-- Returns the new outbox id; NULL when there is no such row waiting.
CREATE FUNCTION sagad_outbox_republish(p_id bigint, p_operator text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    q outbox_quarantine;
    new_id bigint;
BEGIN
    SELECT * INTO q FROM outbox_quarantine WHERE outbox_id = p_id AND status = 'quarantined'
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO outbox (topic, key, headers, payload)
    VALUES (q.topic, q.key, q.headers, q.payload) RETURNING id INTO new_id;
    UPDATE outbox_quarantine SET status = 'republished', resolved_at = now(),
           resolved_by = p_operator, resolved_session_user = session_user,
           republished_id = new_id
     WHERE outbox_id = p_id;
    RETURN new_id;
END $$;

-- Gives a quarantined row up: it stays in the table (status dropped), is
-- never published.  Returns false when there is no such row waiting.
CREATE FUNCTION sagad_outbox_drop(p_id bigint, p_operator text) RETURNS boolean
LANGUAGE sql SECURITY DEFINER AS $$
    WITH d AS (UPDATE outbox_quarantine SET status = 'dropped', resolved_at = now(),
                      resolved_by = p_operator, resolved_session_user = session_user
                WHERE outbox_id = p_id AND status = 'quarantined' RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM d)
$$;

-- The path of every SECURITY DEFINER function (0020): sagad's schema,
-- pg_temp last.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION sagad_outbox_republish(bigint, text) '
                   'SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION sagad_outbox_drop(bigint, text) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
REVOKE EXECUTE ON FUNCTION sagad_outbox_republish(bigint, text),
                           sagad_outbox_drop(bigint, text) FROM PUBLIC;

-- The DLQ message of a ledger row keeps to limits.max_outgoing_bytes (the
-- worker passes it as p_max_bytes), below what the producer accepts.
-- Leaving the payload out (0005) is not always enough: the trail carries
-- each attempt's resolved args (up to four times the message limit), and
-- steps_at and the original headers can be large too.  When the record
-- without its payload is still too large, those go as well: the trail
-- keeps every attempt without its args (and, past the cap still, none),
-- steps_at and original.headers are null, and details_omitted says the
-- ledger row has them (dlq-tool show).
CREATE OR REPLACE FUNCTION sagad_dead_letter_message(d dead_letters, p_max_bytes bigint)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    WITH r AS (SELECT rec || jsonb_build_object('details_omitted', false) AS full_rec
                 FROM sagad_dead_letter_record(d) AS rec),
    lean AS (SELECT full_rec, full_rec || jsonb_build_object(
                        'payload', NULL, 'payload_base64', NULL, 'payload_omitted', true)
                    AS no_payload FROM r),
    bare AS (SELECT full_rec, no_payload, no_payload || jsonb_build_object(
                        'trail', coalesce((SELECT jsonb_agg(a - 'args')
                                             FROM jsonb_array_elements(d.trail) AS a), '[]'),
                        'steps_at', NULL, 'details_omitted', true,
                        'original', (no_payload->'original')
                                    || jsonb_build_object('headers', NULL)) AS no_details
               FROM lean)
    SELECT CASE WHEN octet_length(full_rec::text) <= p_max_bytes THEN full_rec
                WHEN octet_length(no_payload::text) <= p_max_bytes THEN no_payload
                WHEN octet_length(no_details::text) <= p_max_bytes THEN no_details
                ELSE no_details || jsonb_build_object('trail', '[]'::jsonb) END
      FROM bare
$$;

-- The roles of 0021, with the quarantine: the relay moves rows into it;
-- the operator reads it (every table) and acts through the functions.
CREATE OR REPLACE FUNCTION sagad_grant_roles() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s text := quote_ident(current_schema());
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_runtime') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %s TO sagad_runtime', s);
        -- worker: sagas, steps, attempts, outbox, timers, offsets, dead
        -- letters, the builtin ledger, the control history; relay: outbox,
        -- timers, cursors; the janitor: the ledger's rows past their
        -- horizon (directly), the rest through sagad_retention_*.
        GRANT SELECT, INSERT, UPDATE, DELETE ON outbox, timers, consumer_offsets, relay_cursors,
            builtin_ledger TO sagad_runtime;
        GRANT SELECT, INSERT, UPDATE ON sagas, steps, attempts, dead_letters TO sagad_runtime;
        GRANT SELECT, INSERT ON saga_controls TO sagad_runtime;
        GRANT SELECT ON replays, dead_letter_revisions, relay_settings, sagad_schema_migrations
            TO sagad_runtime;
        -- 0022: the relay moves refused rows aside.
        GRANT SELECT, INSERT ON outbox_quarantine TO sagad_runtime;
        REVOKE DELETE, TRUNCATE ON sagas, steps, attempts, dead_letters FROM sagad_runtime;
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON replays, dead_letter_revisions
            FROM sagad_runtime;
        REVOKE UPDATE, DELETE, TRUNCATE ON saga_controls FROM sagad_runtime;
        EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %s TO sagad_runtime', s);
        GRANT EXECUTE ON FUNCTION sagad_relay_try_lock(integer), sagad_relay_unlock(integer),
                                  sagad_janitor_try_lock(), sagad_relay_locks(),
                                  sagad_retention_sagas(float8, bigint),
                                  sagad_retention_dead_letters(float8, bigint) TO sagad_runtime;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_operator') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %s TO sagad_operator', s);
        EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %s TO sagad_operator', s);
        REVOKE ALL ON sagad_lock_salt FROM sagad_operator;
        GRANT EXECUTE ON FUNCTION
            sagad_dlq_replay(bigint, text, text, boolean, boolean, text, text),
            sagad_dlq_discard(bigint, text, text),
            sagad_dlq_edit(bigint, text, text, text),
            sagad_relay_locks(),
            sagad_outbox_republish(bigint, text),
            sagad_outbox_drop(bigint, text) TO sagad_operator;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_reader') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %s TO sagad_reader', s);
        -- sagactl list, status, show (the timeline); sagad-relay status.
        GRANT SELECT ON sagas, steps, attempts, saga_controls, dead_letters, replays,
            dead_letter_revisions, outbox, relay_cursors, relay_settings,
            sagad_schema_migrations TO sagad_reader;
        GRANT EXECUTE ON FUNCTION sagad_relay_locks() TO sagad_reader;
    END IF;
END $$;
SELECT sagad_grant_roles();
