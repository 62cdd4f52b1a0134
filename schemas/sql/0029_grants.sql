-- The group roles' rights as rows of a table, applied by one function.
--
-- Until now every migration that added a table or a function the roles
-- use re-defined sagad_grant_roles() whole (0013, 0021, 0023, 0025, 0026,
-- 0027, 0028): seven copies of one function, each a chance to drop a
-- grant by leaving a line out.  From here on a migration adds rows to
-- sagad_grants, and sagad_grant_roles(), defined here once, applies them
-- all in `ord` order, for each group role that exists, on every `migrate`
-- (a role made after the schema gets its rights at the next run, as
-- before).  The rows below are 0028's function, line for line.
--
-- A row is a GRANT or a REVOKE of named privileges on a named object;
-- the CHECKs keep it to that shape (no statement can be smuggled in
-- through a row: a privilege is one upper-case word, an object a table or
-- function list of plain names, or the schema).  `%s` in `object` stands
-- for the schema, quoted.  Only the owner may write the table.
--
-- ord: runtime 1000-1999, operator 2000-2999, reader 3000-3999; each
-- role's REVOKEs in its x900s, after every GRANT of that role, so that a
-- grant added later never undoes them (the operator's REVOKE of the two
-- secret tables after its SELECT on all tables).  Names are sagad's own:
-- the function qualifies them with the schema, and no row may name this
-- table.  A migration that drops or renames an object, or changes a
-- function's arguments, must UPDATE or DELETE the rows naming it, or
-- every later migrate fails at the grant.
CREATE TABLE sagad_grants (
    ord        integer PRIMARY KEY,
    role       text NOT NULL
               CHECK (role IN ('sagad_runtime', 'sagad_operator', 'sagad_reader')),
    action     text NOT NULL CHECK (action IN ('GRANT', 'REVOKE')),
    privileges text NOT NULL CHECK (privileges ~ '^[A-Z]+(, [A-Z]+)*$'),
    object     text NOT NULL CHECK (
        (object IN ('SCHEMA %s', 'ALL TABLES IN SCHEMA %s', 'ALL SEQUENCES IN SCHEMA %s')
         OR object ~ '^TABLE [a-z_][a-z0-9_]*(, [a-z_][a-z0-9_]*)*$'
         OR object ~ '^FUNCTION [a-z_][a-z0-9_]*\([a-z0-9_, \[\]]*\)(, [a-z_][a-z0-9_]*\([a-z0-9_, \[\]]*\))*$')
        AND object !~ 'sagad_grants'),
    added_by   text NOT NULL -- the migration that added the row
);
REVOKE ALL ON sagad_grants FROM PUBLIC;

INSERT INTO sagad_grants (ord, role, action, privileges, object, added_by) VALUES
    (1000, 'sagad_runtime', 'GRANT', 'USAGE', 'SCHEMA %s', '0029'),
    (1010, 'sagad_runtime', 'GRANT', 'SELECT, INSERT, UPDATE, DELETE',
     'TABLE outbox, timers, consumer_offsets, relay_cursors, builtin_ledger', '0029'),
    (1020, 'sagad_runtime', 'GRANT', 'SELECT, INSERT, UPDATE',
     'TABLE sagas, steps, attempts, dead_letters', '0029'),
    (1030, 'sagad_runtime', 'GRANT', 'SELECT, INSERT', 'TABLE saga_controls', '0029'),
    (1040, 'sagad_runtime', 'GRANT', 'SELECT',
     'TABLE replays, dead_letter_revisions, relay_settings, sagad_schema_migrations', '0029'),
    (1050, 'sagad_runtime', 'GRANT', 'SELECT, INSERT', 'TABLE outbox_quarantine', '0029'),
    (1060, 'sagad_runtime', 'GRANT', 'SELECT', 'TABLE internal_keys', '0029'),
    (1070, 'sagad_runtime', 'GRANT', 'SELECT, INSERT, UPDATE, DELETE',
     'TABLE tool_breakers, partition_lag', '0029'),
    (1080, 'sagad_runtime', 'GRANT', 'SELECT', 'TABLE steps_waiting', '0029'),
    (1900, 'sagad_runtime', 'REVOKE', 'DELETE, TRUNCATE',
     'TABLE sagas, steps, attempts, dead_letters', '0029'),
    (1910, 'sagad_runtime', 'REVOKE', 'INSERT, UPDATE, DELETE, TRUNCATE',
     'TABLE replays, dead_letter_revisions', '0029'),
    (1920, 'sagad_runtime', 'REVOKE', 'UPDATE, DELETE, TRUNCATE', 'TABLE saga_controls', '0029'),
    (1120, 'sagad_runtime', 'GRANT', 'USAGE', 'ALL SEQUENCES IN SCHEMA %s', '0029'),
    (1130, 'sagad_runtime', 'GRANT', 'EXECUTE',
     'FUNCTION sagad_relay_try_lock(integer), sagad_relay_unlock(integer), '
     'sagad_janitor_try_lock(), sagad_relay_locks(), '
     'sagad_retention_sagas(float8, bigint), sagad_retention_dead_letters(float8, bigint), '
     'sagad_outbox_write(text[], text[], jsonb[], text[]), sagad_outbox_to_wal(text), '
     'sagad_outbox_to_table(), sagad_outbox_wal_heartbeat()', '0029'),
    (2000, 'sagad_operator', 'GRANT', 'USAGE', 'SCHEMA %s', '0029'),
    (2010, 'sagad_operator', 'GRANT', 'SELECT', 'ALL TABLES IN SCHEMA %s', '0029'),
    (2900, 'sagad_operator', 'REVOKE', 'ALL', 'TABLE sagad_lock_salt, internal_keys', '0029'),
    (2030, 'sagad_operator', 'GRANT', 'EXECUTE',
     'FUNCTION sagad_dlq_replay(bigint, text, text, boolean, boolean, text, text), '
     'sagad_dlq_discard(bigint, text, text), sagad_dlq_edit(bigint, text, text, text), '
     'sagad_relay_locks(), sagad_outbox_republish(bigint, text), '
     'sagad_outbox_drop(bigint, text)', '0029'),
    (3000, 'sagad_reader', 'GRANT', 'USAGE', 'SCHEMA %s', '0029'),
    (3010, 'sagad_reader', 'GRANT', 'SELECT',
     'TABLE sagas, steps, attempts, saga_controls, dead_letters, replays, '
     'dead_letter_revisions, outbox, relay_cursors, relay_settings, '
     'sagad_schema_migrations, tool_breakers, partition_lag, steps_waiting', '0029'),
    (3020, 'sagad_reader', 'GRANT', 'EXECUTE', 'FUNCTION sagad_relay_locks()', '0029');

CREATE OR REPLACE FUNCTION sagad_grant_roles() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    g sagad_grants;
    obj text;
BEGIN
    FOR g IN SELECT * FROM sagad_grants
              WHERE role IN (SELECT rolname FROM pg_roles) ORDER BY ord LOOP
        -- Every table and function named is sagad's: qualified with the
        -- schema, so that no name can reach pg_catalog's (searched first).
        -- chr(1) marks where the schema goes; a function's argument types
        -- stay unqualified.
        IF g.object LIKE 'TABLE %' THEN
            obj := regexp_replace(g.object, '(^TABLE |, )([a-z_][a-z0-9_]*)', '\1' || chr(1) || '\2', 'g');
        ELSIF g.object LIKE 'FUNCTION %' THEN
            obj := regexp_replace(g.object, '(^FUNCTION |\), )([a-z_][a-z0-9_]*)\(',
                                  '\1' || chr(1) || '\2(', 'g');
        ELSE
            obj := g.object;
        END IF;
        obj := replace(replace(obj, chr(1), quote_ident(current_schema()) || '.'), '%s',
                       quote_ident(current_schema()));
        EXECUTE format('%s %s ON %s %s %I', g.action, g.privileges, obj,
                       CASE g.action WHEN 'GRANT' THEN 'TO' ELSE 'FROM' END, g.role);
    END LOOP;
END $$;
