-- The worker's outgoing messages of one statement in one call (issue 40,
-- item 2; docs/PERFORMANCE.md, "The WAL source on the worker's side").
--
-- With the WAL source, each row the worker inserted into the outbox went
-- through the trigger outbox_emit (0026): a PL/pgSQL call per row, with
-- its own search_path (saved and restored per call), a route lookup and a
-- frame built by a second statement.  Measured on bench-worker's backlog
-- of 15,000 three-step sagas, the worker's PostgreSQL sessions spent twice
-- the CPU of the table source (10.9 s against 5.0 s) and the backlog fell
-- to half.  sagad_outbox_write() takes the whole statement's messages as
-- arrays, decides the route once, and writes them either way in one
-- set-based statement: into the WAL (one pg_logical_emit_message per
-- message, in the arrays' order, ids from the outbox's own sequence) or
-- into the table exactly as the worker's INSERT did (the trigger then
-- routes nothing: the route is the table).  Every other writer (the timer
-- move, sagad_dlq_replay, sagad_outbox_republish, an operator, and the
-- worker's own dead-letter records) still inserts and goes through the
-- trigger.
--
-- Who may call it: the runtime role only (it may insert into the outbox
-- already, so it gains nothing); PUBLIC may not, as it may not emit.
CREATE FUNCTION sagad_outbox_write(p_topics text[], p_keys text[], p_headers jsonb[],
                                   p_payloads text[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    -- The lock an INSERT takes, first: a switch of the source
    -- (sagad_outbox_to_wal, sagad_outbox_to_table) holds the outbox in
    -- EXCLUSIVE mode, so this waits for it and then reads the route the
    -- switch left; and a switch waits for this transaction, as for any
    -- writer's.  Without it, the route would be read before the switch and
    -- kept for the rest of the transaction.
    LOCK TABLE outbox IN ROW EXCLUSIVE MODE;
    IF sagad_outbox_route() = 'wal' THEN
        PERFORM pg_logical_emit_message(true, 'sagad.outbox',
                    sagad_outbox_frame(nextval('outbox_id_seq'::regclass), u.t,
                                       convert_to(u.k, 'UTF8'), u.h, convert_to(u.p, 'UTF8')))
           FROM unnest(p_topics, p_keys, p_headers, p_payloads) AS u(t, k, h, p);
    ELSE
        -- The worker's statement of 0007 (the shard computed here, not by
        -- the per-row trigger; the rows keep unnest's order and ids).
        INSERT INTO outbox (topic, key, headers, payload, shard)
        SELECT u.t, u.k, u.h, convert_to(u.p, 'UTF8'), sagad_outbox_shard_of(u.k, r.shards)
          FROM (SELECT t, convert_to(k, 'UTF8') AS k, h, p
                  FROM unnest(p_topics, p_keys, p_headers, p_payloads) AS u(t, k, h, p)) u
         CROSS JOIN (SELECT max(shards) AS shards FROM relay_settings) r;
    END IF;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION sagad_outbox_write(text[], text[], jsonb[], text[]) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
REVOKE EXECUTE ON FUNCTION sagad_outbox_write(text[], text[], jsonb[], text[]) FROM PUBLIC;

-- ---- the roles: 0027's, sagad_outbox_write for the runtime, and 0026's ----
-- source functions, granted until now only by 0026 itself (a runtime role
-- made after it did not get them).

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
        GRANT SELECT ON steps_waiting TO sagad_runtime;
        REVOKE DELETE, TRUNCATE ON sagas, steps, attempts, dead_letters FROM sagad_runtime;
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON replays, dead_letter_revisions
            FROM sagad_runtime;
        REVOKE UPDATE, DELETE, TRUNCATE ON saga_controls FROM sagad_runtime;
        EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %s TO sagad_runtime', s);
        GRANT EXECUTE ON FUNCTION sagad_relay_try_lock(integer), sagad_relay_unlock(integer),
                                  sagad_janitor_try_lock(), sagad_relay_locks(),
                                  sagad_retention_sagas(float8, bigint),
                                  sagad_retention_dead_letters(float8, bigint),
                                  sagad_outbox_write(text[], text[], jsonb[], text[]),
                                  sagad_outbox_to_wal(text), sagad_outbox_to_table(),
                                  sagad_outbox_wal_heartbeat()
            TO sagad_runtime;
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
