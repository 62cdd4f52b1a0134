-- Every SECURITY DEFINER function searches pg_temp last, and a revision
-- of a dead letter's payload is a JSON object (issue 36 item 5).
--
-- They were created with `SET search_path FROM CURRENT`, the schema of
-- sagad's tables; PostgreSQL then still searches pg_temp FIRST for tables
-- (it is searched first whenever the path does not name it).  So any
-- login that may create temporary tables (every role, by default) could
-- shadow `dead_letters` with a temporary table of its own and have, for
-- example, sagad_dlq_replay() run with the owner's rights publish a payload
-- of its choice to a topic of its choice.  Naming pg_temp last in the path
-- closes that: unqualified names resolve in sagad's schema.  The functions
-- a later migration creates set the same path.
-- `dlq-tool edit` checks a revision against the contract before it calls
-- this; the function is also open to any login with the operator role
-- (psql), which could store a revision that is no command at all (a
-- number, a string, text that is not JSON) for a replay to publish.  The
-- same function, now refusing that with SQLSTATE 22023 and the rule.
CREATE OR REPLACE FUNCTION sagad_dlq_edit(p_id bigint, p_payload text, p_operator text,
                                          p_reason text)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    doc jsonb;
    rev integer;
BEGIN
    BEGIN
        doc := p_payload::jsonb;
    EXCEPTION WHEN others THEN
        RAISE EXCEPTION 'payload: must be JSON (a command message), got text that is not'
            USING ERRCODE = '22023';
    END;
    IF jsonb_typeof(doc) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'payload: type: expected a JSON object (a command message), got %',
            coalesce(jsonb_typeof(doc), 'nothing') USING ERRCODE = '22023';
    END IF;
    WITH l AS (SELECT id FROM dead_letters WHERE id = p_id FOR UPDATE)
    INSERT INTO dead_letter_revisions (dead_letter_id, revision, payload, operator, reason)
    SELECT l.id, coalesce((SELECT max(revision) FROM dead_letter_revisions
                            WHERE dead_letter_id = l.id), 0) + 1,
           convert_to(p_payload, 'UTF8'), p_operator, p_reason FROM l
    RETURNING revision INTO rev;
    RETURN rev;
END $$;

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
