-- The trust boundary (issue 36; docs/ARCHITECTURE.md, "Trust boundary").
--
-- Internal keys: the HMAC-SHA256 secrets with which the relay signs every
-- message it publishes (header sagad-mac) and the worker checks the
-- internal commands (step.execute, step.compensate, saga.release,
-- step.approval_timeout) before acting on one.  Kept here so that the two
-- share them without a file to distribute; only the owner and
-- sagad_runtime (worker and relay) may read them: not the operator, not a
-- producer, who can therefore not forge an internal command.
--
-- A key signs from signs_from on (the newest such key signs) and is
-- accepted until expires_at (NULL: no end).  Worker and relay re-read the
-- table every security.key_reload_ms, so a rotation needs no restart:
-- sagad_internal_key_rotate() adds a key that signs only after p_lead (by
-- then every process has read it) and lets the old ones expire p_grace
-- later (the messages they signed still in Kafka are read by then; one
-- read later is dead-lettered with input.command.unauthenticated and can
-- be replayed, which signs it again).
CREATE TABLE internal_keys (
    id         text PRIMARY KEY CHECK (id ~ '^[a-z0-9]{1,16}$'),
    secret     bytea NOT NULL CHECK (length(secret) BETWEEN 32 AND 64),
    created_at timestamptz NOT NULL DEFAULT now(),
    signs_from timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz
);
REVOKE ALL ON internal_keys FROM PUBLIC;

-- 48 bytes from the server's strong random source (gen_random_uuid() reads
-- pg_strong_random: 122 random bits a UUID, 366 in all).
CREATE FUNCTION sagad_internal_key_secret() RETURNS bytea LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
    SELECT decode(replace(gen_random_uuid()::text || gen_random_uuid()::text
                          || gen_random_uuid()::text, '-', ''), 'hex')
$$;

-- Adds a key that signs from now() + p_lead, and makes every key live now
-- expire p_lead + p_grace from now.  Returns the new key's id.  The
-- owner's (run it as the role that runs migrate).
CREATE FUNCTION sagad_internal_key_rotate(p_lead interval DEFAULT '2 minutes',
                                          p_grace interval DEFAULT '1 day')
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    new_id text := 'k' || to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS');
BEGIN
    IF p_lead < interval '0' OR p_grace < interval '0' THEN
        RAISE EXCEPTION 'p_lead and p_grace must not be negative';
    END IF;
    UPDATE internal_keys SET expires_at = now() + p_lead + p_grace
     WHERE expires_at IS NULL OR expires_at > now() + p_lead + p_grace;
    INSERT INTO internal_keys (id, secret, signs_from)
    VALUES (new_id, sagad_internal_key_secret(), now() + p_lead);
    RETURN new_id;
END $$;
REVOKE EXECUTE ON FUNCTION sagad_internal_key_rotate(interval, interval) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION sagad_internal_key_secret() FROM PUBLIC;

-- The first key signs at once.
INSERT INTO internal_keys (id, secret) VALUES ('k1', sagad_internal_key_secret());

-- Who submitted a saga: the principal whose Ed25519 signature (header
-- sagad-auth) the worker verified against its keyring, NULL for an
-- unsigned submission.  Four eyes: that principal may not approve the
-- saga's steps.
ALTER TABLE sagas ADD COLUMN submitted_by text;
-- The verified principal of a control command (requested_by stays what the
-- command declared in "by").
ALTER TABLE saga_controls ADD COLUMN principal text;

-- The roles as 0021 and 0022 left them, and the internal keys: sagad_runtime
-- reads them; sagad_operator, which reads every other table, does not; nor
-- does sagad_reader, which reads only what it is granted by name.
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
        -- 0023: worker and relay read the internal keys.
        GRANT SELECT ON internal_keys TO sagad_runtime;
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
        REVOKE ALL ON sagad_lock_salt, internal_keys FROM sagad_operator;
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
