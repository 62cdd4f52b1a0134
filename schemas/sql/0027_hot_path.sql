-- Three schema objects of 0024-0026 cost the worker's every step, for the
-- console or a relay source not in use (issue 36: the backlog 16% lower
-- than before the topic split; measured by bench-worker's SQL floor over
-- 15,000 sagas, docs/PERFORMANCE.md, "Where the backlog went"):
--
-- 1. steps_awaiting_approval (0024) indexes steps on updated_at where
--    status = 'awaiting_approval'.  A column an index names, in its key or
--    its predicate, takes HOT updates away from every update that changes
--    it: each step's two status changes then wrote a new entry in every
--    index of steps.  The steps waiting for a person are now rows of their
--    own, steps_waiting, kept by triggers that fire only when a step
--    enters or leaves that status (their WHEN clause is checked without
--    calling a function); steps has no index on status again.
-- 2. attempts_started (0025), one more index entry per attempt, for the
--    console's recent error rate.  That statement now walks attempts_pkey
--    backwards (ids are given in insert order, as started_at is set),
--    bounded in rows, and the index goes.
-- 3. outbox_emit (0026), a PL/pgSQL trigger with its own search_path, ran
--    for every outbox row, to find the source is 'table'.  It is now
--    enabled only while the source is 'wal': sagad_outbox_to_wal()
--    enables it and sagad_outbox_to_table() disables it, each under the
--    lock they already take.  With the source 'wal' it routes as before
--    (the table again while the slot is missing).

-- ---- 1. the steps waiting for a person -------------------------------------

DROP INDEX IF EXISTS steps_awaiting_approval;

CREATE TABLE steps_waiting (
    saga_id          text NOT NULL,
    idx              integer NOT NULL,
    PRIMARY KEY (saga_id, idx)
);

-- Rows of steps that are 'awaiting_approval'.  Readers join steps and
-- check the status again, so a row left by a TRUNCATE of steps (tests) is
-- never counted.
CREATE FUNCTION sagad_steps_waiting() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.status = 'awaiting_approval' THEN
            DELETE FROM steps_waiting WHERE saga_id = OLD.saga_id AND idx = OLD.idx;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.status = 'awaiting_approval' THEN
            INSERT INTO steps_waiting (saga_id, idx) VALUES (NEW.saga_id, NEW.idx)
                ON CONFLICT DO NOTHING;
        END IF;
    END IF;
    RETURN NULL;
END $$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION sagad_steps_waiting() SET search_path = %I, pg_temp',
                   current_schema());
END $$;
REVOKE EXECUTE ON FUNCTION sagad_steps_waiting() FROM PUBLIC;

CREATE TRIGGER steps_waiting_insert AFTER INSERT ON steps
    FOR EACH ROW WHEN (NEW.status = 'awaiting_approval')
    EXECUTE FUNCTION sagad_steps_waiting();
CREATE TRIGGER steps_waiting_update AFTER UPDATE OF status ON steps
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       AND (OLD.status = 'awaiting_approval' OR NEW.status = 'awaiting_approval'))
    EXECUTE FUNCTION sagad_steps_waiting();
CREATE TRIGGER steps_waiting_delete AFTER DELETE ON steps
    FOR EACH ROW WHEN (OLD.status = 'awaiting_approval')
    EXECUTE FUNCTION sagad_steps_waiting();

INSERT INTO steps_waiting (saga_id, idx)
    SELECT saga_id, idx FROM steps WHERE status = 'awaiting_approval';

-- ---- 2. no index for the recent error rate ---------------------------------

DROP INDEX IF EXISTS attempts_started;

-- ---- 3. the WAL trigger only for the WAL source ----------------------------

CREATE OR REPLACE FUNCTION sagad_outbox_to_wal(p_slot text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    o outbox;
    n bigint := 0;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_replication_slots
                    WHERE slot_name = p_slot AND database = current_database()
                      AND plugin = 'pgoutput' AND wal_status IS DISTINCT FROM 'lost') THEN
        RAISE EXCEPTION 'no pgoutput replication slot % in database %', p_slot,
            current_database() USING ERRCODE = 'undefined_object';
    END IF;
    IF (SELECT source = 'wal' AND wal_slot = p_slot FROM relay_settings)
       AND (SELECT tgenabled <> 'D' FROM pg_trigger
             WHERE tgrelid = 'outbox'::regclass AND tgname = 'outbox_emit')
       AND NOT EXISTS (SELECT 1 FROM outbox) THEN
        RETURN 0;
    END IF;
    LOCK TABLE outbox IN EXCLUSIVE MODE;
    ALTER TABLE outbox ENABLE TRIGGER outbox_emit;
    UPDATE relay_settings SET source = 'wal', wal_slot = p_slot,
           source_changed_at = now(), source_changed_lsn = pg_current_wal_lsn()
     WHERE source <> 'wal' OR wal_slot IS DISTINCT FROM p_slot;
    FOR o IN SELECT * FROM outbox ORDER BY tx, id LOOP
        PERFORM pg_logical_emit_message(true, 'sagad.outbox',
            sagad_outbox_frame(o.id, o.topic, o.key, o.headers, o.payload));
        n := n + 1;
    END LOOP;
    DELETE FROM outbox;
    RETURN n;
END $$;

CREATE OR REPLACE FUNCTION sagad_outbox_to_table() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    LOCK TABLE outbox IN EXCLUSIVE MODE;
    ALTER TABLE outbox DISABLE TRIGGER outbox_emit;
    UPDATE relay_settings SET source = 'table', source_changed_at = now(),
           source_changed_lsn = pg_current_wal_lsn();
END $$;

-- CREATE OR REPLACE took their SET clauses away.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION sagad_outbox_to_wal(text) SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION sagad_outbox_to_table() SET search_path = %I, pg_temp',
                   current_schema());
END $$;

DO $$
BEGIN
    IF (SELECT source FROM relay_settings) = 'table' THEN
        ALTER TABLE outbox DISABLE TRIGGER outbox_emit;
    END IF;
END $$;

-- ---- the roles: 0025's, and steps_waiting for those who read steps -------

CREATE OR REPLACE FUNCTION sagad_grant_roles() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s text := quote_ident(current_schema());
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_runtime') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %s TO sagad_runtime', s);
        GRANT SELECT, INSERT, UPDATE, DELETE ON outbox, timers, consumer_offsets, relay_cursors,
            builtin_ledger TO sagad_runtime;
        GRANT SELECT, INSERT, UPDATE ON sagas, steps, attempts, dead_letters TO sagad_runtime;
        GRANT SELECT, INSERT ON saga_controls TO sagad_runtime;
        GRANT SELECT ON replays, dead_letter_revisions, relay_settings, sagad_schema_migrations
            TO sagad_runtime;
        GRANT SELECT, INSERT ON outbox_quarantine TO sagad_runtime;
        GRANT SELECT ON internal_keys TO sagad_runtime;
        GRANT SELECT, INSERT, UPDATE, DELETE ON tool_breakers, partition_lag TO sagad_runtime;
        -- 0027: kept by the triggers of steps (SECURITY DEFINER), read only.
        GRANT SELECT ON steps_waiting TO sagad_runtime;
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
        GRANT SELECT ON sagas, steps, attempts, saga_controls, dead_letters, replays,
            dead_letter_revisions, outbox, relay_cursors, relay_settings,
            sagad_schema_migrations, tool_breakers, partition_lag, steps_waiting
            TO sagad_reader;
        GRANT EXECUTE ON FUNCTION sagad_relay_locks() TO sagad_reader;
    END IF;
END $$;
SELECT sagad_grant_roles();
