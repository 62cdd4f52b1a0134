-- What the operator console shows of the workers' own state (issue 38;
-- GET /v1/tools, GET /v1/summary, docs/CONSOLE.md): each tool's circuit
-- breaker, its recent error rate, and each partition's lag.
--
-- The breaker and the lag live in a worker's memory; the gateway is
-- stateless and reads PostgreSQL, so each worker copies them here from its
-- housekeeping (worker/loop/worker_status.c): at once when a breaker
-- changes state, and every 5 s otherwise, in one statement on the
-- connection that reads the internal keys, never in a saga's transaction.
-- seen_at / measured_at are the worker's heartbeat: a row not written for
-- 30 s is a worker that is gone or cut off, and readers ignore it; a row
-- not written for an hour is deleted by the next worker's write.

-- A tool's breaker as one worker holds it (only http and exec tools have
-- one).  since: when it entered this state (the worker's start for a
-- breaker that never moved); failures: the consecutive failures counted
-- (those that opened it, while open).
CREATE TABLE tool_breakers (
    worker_id        text NOT NULL,
    tool             text NOT NULL,
    state            text NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    since            timestamptz NOT NULL,
    failures         integer NOT NULL DEFAULT 0,
    transitions      bigint NOT NULL DEFAULT 0,
    seen_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (worker_id, tool)
);

-- A partition's lag as its owner last saw it: the high watermark its
-- consumer fetched, minus the offset stored in consumer_offsets.  Apart
-- from consumer_offsets so that this write never waits on (or deadlocks
-- with) the row locks of the fences in the sagas' transactions.  The lag
-- belongs to the owner whose owner_epoch it carries.
CREATE TABLE partition_lag (
    group_id         text NOT NULL,
    topic            text NOT NULL,
    partition        integer NOT NULL,
    owner_epoch      bigint NOT NULL,
    high_watermark   bigint NOT NULL,
    lag              bigint NOT NULL CHECK (lag >= 0),
    measured_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, partition)
);

-- The recent error rate per tool (GET /v1/tools): the attempts started in
-- the last 5 minutes, newest first.  started_at is set once, at insert,
-- so the attempt's one update (finished) stays a HOT update (0008); the
-- cost is one more index entry per attempt, at the index's right edge.
CREATE INDEX attempts_started ON attempts (started_at);

-- The roles as 0023 left them, and the two tables: sagad_runtime writes
-- them; sagad_operator reads them as every table; sagad_reader too, for
-- dashboards.
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
        -- 0025: the workers' breakers and lag.
        GRANT SELECT, INSERT, UPDATE, DELETE ON tool_breakers, partition_lag TO sagad_runtime;
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
            sagad_schema_migrations, tool_breakers, partition_lag TO sagad_reader;
        GRANT EXECUTE ON FUNCTION sagad_relay_locks() TO sagad_reader;
    END IF;
END $$;
SELECT sagad_grant_roles();
