-- Database least privilege, finished (issue 36 item 5; docs/OPERATIONS.md,
-- "Database roles"): the relay's and the janitor's advisory locks are
-- taken through functions only the runtime role may call, under keys no
-- other login can know in advance; the operator's audit ledgers are
-- append-only for the runtime role; a read-only role for sagactl and
-- dashboards.
--
-- Locks.  pg_try_advisory_lock() is open to every login of the database,
-- and the keys were fixed numbers (0x5a6ad0020000 + shard, 0x5a6ad0030000)
-- written in the docs: any login could take a shard's lock first and no
-- relay would publish that shard.  Revoking EXECUTE on the built-in
-- functions needs a superuser, which a managed database does not give.
-- Instead the keys are derived from a random salt made here, in a table
-- only the owner reads (sagad_lock_salt), by sagad_lock_key(); the relay
-- and the janitor take them through sagad_relay_try_lock(),
-- sagad_relay_unlock() and sagad_janitor_try_lock(), SECURITY DEFINER,
-- EXECUTE granted to sagad_runtime only.  The lock still belongs to the
-- session (the server drops it when the session ends, which is what hands
-- a shard to a standby).
--
-- What this does not promise: pg_locks shows every held advisory lock to
-- every login, so a login that watches it learns a key while it is held
-- and can take it the moment its holder's session ends (a relay's crash or
-- rollout), stalling that shard or the janitor until its own session ends.
-- That is accepted: it can stall, not publish (it has no right on the
-- outbox), `sagad-relay status` shows the shard held with a stale holder
-- heartbeat, and any login may already stall every shard another way (a
-- transaction held open keeps the snapshot's xmin back, and the relay
-- publishes only rows older than every running transaction).  The defence
-- against a hostile login is to take its CONNECT away.  What the salt
-- closes is the blind, standing claim: a key taken before sagad ever runs,
-- or a number another application happens to lock.
--
-- Upgrade: a relay of schema 20 or older still takes the fixed key.  So
-- that one of each never publishes the same shard during a rolling
-- upgrade, sagad_relay_try_lock() takes the fixed key too when it is free,
-- and when it is not, gives the shard up if the holder's login could be a
-- relay (may DELETE from the outbox); a holder that could not be one is a
-- squatter and ignored.  The janitor's fixed key is treated the same way.
--
-- Append-only.  replays, dead_letter_revisions and saga_controls record
-- who did what; the runtime role may read them and INSERT into
-- saga_controls (the worker writes the control history), never UPDATE,
-- DELETE or TRUNCATE them.  Retention, which removes them past their
-- horizon, deletes through sagad_retention_sagas() and
-- sagad_retention_dead_letters() (SECURITY DEFINER, the runtime's), which
-- remove only what retention's rule allows: a finished saga no dead
-- letter names, with its steps, attempts and control history; a handled
-- dead letter with its replays and revisions.  The runtime role loses
-- DELETE on sagas, steps, attempts and dead_letters too (only retention
-- deleted them): deleting a saga cascades into its saga_controls rows, so
-- DELETE on sagas would be a way around the ledger's rule.  The horizon
-- is still the caller's (retention.* is the relay's config): a runtime
-- login can shorten it, not reach past the rule.
--
-- Reader.  sagad_reader (group, NOLOGIN) may SELECT what `sagactl list`,
-- `status`, `show` (the timeline) and `sagad-relay status` read, and call
-- sagad_relay_locks() (which shard is held, no key); no write, no other
-- function.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_reader') THEN
        BEGIN
            CREATE ROLE sagad_reader NOLOGIN;
        EXCEPTION WHEN insufficient_privilege OR duplicate_object OR unique_violation THEN
            RAISE NOTICE 'role sagad_reader not created (%): create it as a superuser', SQLERRM;
        END;
    END IF;
END $$;

-- ---- locks -----------------------------------------------------------

-- One row, made once; 244 random bits (two version-4 UUIDs).  Only the
-- owner reads it: sagad_grant_roles() takes it out of the operator's
-- SELECT on every table.
CREATE TABLE sagad_lock_salt (salt text NOT NULL);
INSERT INTO sagad_lock_salt (salt) VALUES (gen_random_uuid()::text || gen_random_uuid()::text);
REVOKE ALL ON sagad_lock_salt FROM PUBLIC;

-- The key of lock what/n, non-negative (pg_locks splits it into two oids).
CREATE FUNCTION sagad_lock_key(p_what text, p_n integer) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT ('x' || left(md5(s.salt || '/' || p_what || '/' || p_n), 16))::bit(64)::bigint
           & 9223372036854775807
      FROM sagad_lock_salt s
$$;

-- Whether a session other than this one holds advisory key p_key, and,
-- with p_relay_only, whether that session's login could be a relay (may
-- DELETE from the outbox).
CREATE FUNCTION sagad_lock_held(p_key bigint, p_relay_only boolean) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND ((l.classid::bigint << 32) | l.objid::bigint) = p_key
           AND l.pid <> pg_backend_pid()
           AND (NOT p_relay_only
                OR coalesce(has_table_privilege(a.usename, 'outbox', 'DELETE'), false)))
$$;

-- Whether this session holds advisory key p_key (pg_advisory_unlock of a
-- key not held warns).
CREATE FUNCTION sagad_lock_mine(p_key bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks l
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
           AND l.pid = pg_backend_pid()
           AND ((l.classid::bigint << 32) | l.objid::bigint) = p_key)
$$;

-- Takes lock what/n and the fixed key of schema 20 (p_fixed): true when
-- the session holds the first.  See "Upgrade" above for the second.
CREATE FUNCTION sagad_lock_take(p_what text, p_n integer, p_fixed bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    k bigint := sagad_lock_key(p_what, p_n);
BEGIN
    IF sagad_lock_mine(k) THEN
        RETURN true;
    END IF;
    IF NOT pg_try_advisory_lock(k) THEN
        RETURN false;
    END IF;
    IF pg_try_advisory_lock(p_fixed) OR NOT sagad_lock_held(p_fixed, true) THEN
        RETURN true;
    END IF;
    PERFORM pg_advisory_unlock(k);
    RETURN false;
END $$;

CREATE FUNCTION sagad_relay_try_lock(p_shard integer) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT sagad_lock_take('relay', p_shard, 99414802825216 + p_shard)  -- 0x5a6ad0020000
$$;

CREATE FUNCTION sagad_relay_unlock(p_shard integer) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    k bigint := sagad_lock_key('relay', p_shard);
    fixed bigint := 99414802825216 + p_shard;
BEGIN
    IF sagad_lock_mine(fixed) THEN
        PERFORM pg_advisory_unlock(fixed);
    END IF;
    RETURN sagad_lock_mine(k) AND pg_advisory_unlock(k);
END $$;

CREATE FUNCTION sagad_janitor_try_lock() RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT sagad_lock_take('janitor', 0, 99414802890752)  -- 0x5a6ad0030000
$$;

-- `sagad-relay status`: which shards a session holds (a relay of schema
-- 20 or older counts by its fixed key).  It names no key.
CREATE FUNCTION sagad_relay_locks() RETURNS TABLE (shard integer, held boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT s, sagad_lock_held(sagad_lock_key('relay', s), false)
              OR sagad_lock_held(99414802825216 + s, true)
      FROM generate_series(0, (SELECT shards FROM relay_settings) - 1) AS g(s)
$$;

REVOKE EXECUTE ON FUNCTION sagad_lock_key(text, integer), sagad_lock_held(bigint, boolean),
                           sagad_lock_mine(bigint), sagad_lock_take(text, integer, bigint),
                           sagad_relay_try_lock(integer), sagad_relay_unlock(integer),
                           sagad_janitor_try_lock(), sagad_relay_locks() FROM PUBLIC;

-- ---- retention -------------------------------------------------------

-- One batch of finished sagas no dead letter names, with their steps,
-- attempts and (by cascade) control history: the janitor's statement of
-- 0012, moved here.  SKIP LOCKED: a saga a worker holds waits.
CREATE FUNCTION sagad_retention_sagas(p_horizon_s float8, p_batch bigint, OUT sagas bigint,
                                      OUT steps bigint, OUT attempts bigint)
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    WITH s AS (SELECT saga_id FROM sagas
                WHERE status IN ('completed', 'compensated', 'failed', 'cancelled')
                  AND updated_at < now() - make_interval(secs => p_horizon_s)
                  AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.saga_id = sagas.saga_id)
                LIMIT p_batch FOR UPDATE SKIP LOCKED),
         a AS (DELETE FROM attempts WHERE saga_id IN (SELECT saga_id FROM s) RETURNING 1),
         t AS (DELETE FROM steps WHERE saga_id IN (SELECT saga_id FROM s) RETURNING 1),
         g AS (DELETE FROM sagas WHERE saga_id IN (SELECT saga_id FROM s) RETURNING 1)
    SELECT (SELECT count(*) FROM g), (SELECT count(*) FROM t), (SELECT count(*) FROM a)
$$;

-- One batch of handled dead letters with their replays and revisions.
CREATE FUNCTION sagad_retention_dead_letters(p_horizon_s float8, p_batch bigint,
                                             OUT dead_letters bigint, OUT replays bigint,
                                             OUT revisions bigint)
LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    WITH d AS (SELECT id FROM dead_letters WHERE status <> 'pending'
                  AND resolved_at < now() - make_interval(secs => p_horizon_s)
                LIMIT p_batch FOR UPDATE SKIP LOCKED),
         r AS (DELETE FROM replays WHERE dead_letter_id IN (SELECT id FROM d) RETURNING 1),
         v AS (DELETE FROM dead_letter_revisions WHERE dead_letter_id IN (SELECT id FROM d)
               RETURNING 1),
         x AS (DELETE FROM dead_letters WHERE id IN (SELECT id FROM d) RETURNING 1)
    SELECT (SELECT count(*) FROM x), (SELECT count(*) FROM r), (SELECT count(*) FROM v)
$$;

REVOKE EXECUTE ON FUNCTION sagad_retention_sagas(float8, bigint),
                           sagad_retention_dead_letters(float8, bigint) FROM PUBLIC;

-- 0017's trigger function was left executable by every login; it runs
-- only as a trigger, on replays rows the owner's sagad_dlq_replay writes.
REVOKE EXECUTE ON FUNCTION sagad_replay_group_members() FROM PUBLIC;

-- ---- grants ----------------------------------------------------------

-- The roles of 0016 (sagad_grant_roles, which migrate calls every time),
-- less the runtime's DELETE on what retention removes, plus the lock and
-- retention functions and the reader.  GRANT only adds, so what an older
-- version of this function granted is revoked by name.
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
            sagad_relay_locks() TO sagad_operator;
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

-- The functions above search pg_temp last, as 0020 made every SECURITY
-- DEFINER function do.
DO $$
DECLARE
    f record;
BEGIN
    FOR f IN SELECT p.oid::regprocedure AS sig
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = current_schema() AND p.prosecdef LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f.sig, current_schema());
    END LOOP;
END $$;
