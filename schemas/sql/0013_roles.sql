-- Least-privilege roles (issue 28; docs/OPERATIONS.md, "Database roles").
--
-- Three kinds of database role use sagad:
--   the owner     runs `migrate` and owns every table and function (the
--                 role this file runs as: the migrate Job's);
--   sagad_runtime the worker and the relay (its janitor included): the DML
--                 they need on the tables they touch, nothing else (no
--                 ALTER, DROP, TRUNCATE, no CREATE in the schema);
--   sagad_operator dlq-tool: reads everything, and replays, discards and
--                 edits dead letters only through the sagad_dlq_* functions,
--                 which record the declared operator and session_user.
-- sagad_runtime and sagad_operator are group roles (NOLOGIN): the login
-- roles the binaries connect as are made their members (GRANT
-- sagad_runtime TO app_login) by deploy/local/pg.sh, or by the DBA of a
-- managed database, who creates the two group roles too when the owner may
-- not (it needs CREATEROLE).  The grants below are made when the group
-- roles exist; run `migrate` again after creating them (this migration is
-- then re-applied by sagad_grant_roles(), which migrate calls every time).

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_runtime') THEN
        BEGIN
            CREATE ROLE sagad_runtime NOLOGIN;
        EXCEPTION WHEN insufficient_privilege OR duplicate_object OR unique_violation THEN
            RAISE NOTICE 'role sagad_runtime not created (%): create it as a superuser', SQLERRM;
        END;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_operator') THEN
        BEGIN
            CREATE ROLE sagad_operator NOLOGIN;
        EXCEPTION WHEN insufficient_privilege OR duplicate_object OR unique_violation THEN
            RAISE NOTICE 'role sagad_operator not created (%): create it as a superuser', SQLERRM;
        END;
    END IF;
END $$;

-- Who did it, as PostgreSQL saw it: session_user is the login role of the
-- session (unchanged inside the SECURITY DEFINER functions below), beside
-- the operator name dlq-tool declares (--operator, $USER).  Rows written
-- before this migration have NULL.
ALTER TABLE replays ADD COLUMN session_user_name text;
ALTER TABLE replays ALTER COLUMN session_user_name SET DEFAULT session_user;
ALTER TABLE dead_letter_revisions ADD COLUMN session_user_name text;
ALTER TABLE dead_letter_revisions ALTER COLUMN session_user_name SET DEFAULT session_user;
ALTER TABLE dead_letters ADD COLUMN resolved_session_user text;

CREATE FUNCTION sagad_dead_letter_resolved_by_session() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.resolved_session_user := session_user;
    RETURN NEW;
END $$;
CREATE TRIGGER dead_letters_resolved_session BEFORE UPDATE OF status ON dead_letters
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION sagad_dead_letter_resolved_by_session();

-- `dlq-tool edit`: a new revision of a dead letter's payload.  Returns the
-- revision number, NULL when there is no such dead letter.
CREATE FUNCTION sagad_dlq_edit(p_id bigint, p_payload text, p_operator text, p_reason text)
RETURNS integer LANGUAGE sql AS $$
    WITH l AS (SELECT id FROM dead_letters WHERE id = p_id FOR UPDATE)
    INSERT INTO dead_letter_revisions (dead_letter_id, revision, payload, operator, reason)
    SELECT l.id, coalesce((SELECT max(revision) FROM dead_letter_revisions
                            WHERE dead_letter_id = l.id), 0) + 1,
           convert_to(p_payload, 'UTF8'), p_operator, p_reason FROM l
    RETURNING revision
$$;

-- The operator's writes run with the owner's rights, on a fixed search
-- path (a caller's own objects cannot stand in for ours).
ALTER FUNCTION sagad_dlq_replay(bigint, text, text, boolean, boolean, text)
    SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION sagad_dlq_discard(bigint, text, text) SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION sagad_dlq_edit(bigint, text, text, text) SECURITY DEFINER SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sagad_dlq_replay(bigint, text, text, boolean, boolean, text),
                           sagad_dlq_discard(bigint, text, text),
                           sagad_dlq_edit(bigint, text, text, text) FROM PUBLIC;

-- The grants, in a function so `migrate` can make them again after the
-- group roles appear (and so a table added later is granted in one place).
CREATE FUNCTION sagad_grant_roles() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    s text := quote_ident(current_schema());
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_runtime') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %s TO sagad_runtime', s);
        -- worker: sagas, steps, attempts, outbox, timers, offsets, dead
        -- letters, the builtin ledger; relay: outbox, timers, cursors, and
        -- the janitor's deletes (replays and revisions only go).
        GRANT SELECT, INSERT, UPDATE, DELETE ON sagas, steps, attempts, outbox, timers,
            consumer_offsets, relay_cursors, dead_letters, builtin_ledger TO sagad_runtime;
        GRANT SELECT, DELETE ON replays, dead_letter_revisions TO sagad_runtime;
        GRANT SELECT ON relay_settings, sagad_schema_migrations TO sagad_runtime;
        EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %s TO sagad_runtime', s);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_operator') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %s TO sagad_operator', s);
        EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %s TO sagad_operator', s);
        GRANT EXECUTE ON FUNCTION sagad_dlq_replay(bigint, text, text, boolean, boolean, text),
                                  sagad_dlq_discard(bigint, text, text),
                                  sagad_dlq_edit(bigint, text, text, text) TO sagad_operator;
    END IF;
END $$;
SELECT sagad_grant_roles();
