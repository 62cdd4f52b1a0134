-- Control commands: cancellation and approval gates (issue 25; DESIGN
-- section 10, docs/WORKER.md "Cancellation" and "Approval gates").

-- saga.cancel: a running or held saga becomes `cancelling` (it compensates
-- what it did, in reverse) and ends `cancelled`.
ALTER TABLE sagas DROP CONSTRAINT sagas_status_check;
ALTER TABLE sagas ADD CONSTRAINT sagas_status_check
    CHECK (status IN ('running', 'held', 'completed', 'compensating', 'compensated', 'failed',
                      'cancelling', 'cancelled'));

-- Approval gates: a step with a gate waits `awaiting_approval` (announced
-- by step.approval_requested) until saga.approve makes it `approved` (its
-- step.execute then runs it) or saga.reject, or its timer, fails it.
ALTER TABLE steps DROP CONSTRAINT steps_status_check;
ALTER TABLE steps ADD CONSTRAINT steps_status_check
    CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'unknown',
                      'compensating', 'compensated', 'compensation_failed', 'skipped',
                      'awaiting_approval', 'approved'));

-- The step's gate, NULL: none.  {"timeout_ms", "reason"} as the step's
-- "approval" gave them (both optional), and "registry": true when its tool
-- is registered with "approval": "required".
ALTER TABLE steps ADD COLUMN approval jsonb;

-- The saga's history of control commands: who asked what, why, and
-- whether the worker carried it out (accepted) or answered that it could
-- not (refused, with the error code of its saga.command_refused event).
-- A command for a saga that does not exist has no row (it is answered by
-- an event only).  Removed with its saga (retention).
CREATE TABLE saga_controls (
    id           bigserial PRIMARY KEY,
    saga_id      text NOT NULL REFERENCES sagas ON DELETE CASCADE,
    command      text NOT NULL,
    command_id   text NOT NULL,
    step_idx     integer,
    requested_by text NOT NULL,
    reason       text NOT NULL,
    outcome      text NOT NULL CHECK (outcome IN ('accepted', 'refused')),
    error_code   text,
    decided_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX saga_controls_saga ON saga_controls (saga_id, id);

-- The roles of 0013 as 0015 left them (sagad_grant_roles, which migrate
-- calls every time), with the history's grant for the worker.
CREATE OR REPLACE FUNCTION sagad_grant_roles() RETURNS void LANGUAGE plpgsql AS $$
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
        -- 0016: the worker writes the saga's control history; retention
        -- removes it with its saga.
        GRANT SELECT, INSERT, DELETE ON saga_controls TO sagad_runtime;
        GRANT SELECT ON relay_settings, sagad_schema_migrations TO sagad_runtime;
        EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %s TO sagad_runtime', s);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_operator') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %s TO sagad_operator', s);
        EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %s TO sagad_operator', s);
        -- the replay of 0015 (its seventh argument: --rerun-from)
        GRANT EXECUTE ON FUNCTION
            sagad_dlq_replay(bigint, text, text, boolean, boolean, text, text),
            sagad_dlq_discard(bigint, text, text),
            sagad_dlq_edit(bigint, text, text, text) TO sagad_operator;
    END IF;
END $$;
SELECT sagad_grant_roles();
