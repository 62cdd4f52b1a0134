-- dlq-tool: payload revisions for `edit`, what a replay did, and the
-- indexes behind `list` (newest first under any one filter).

-- Every `dlq-tool edit` saves a new revision of the payload; the ledger
-- row's own payload is never changed.  A replay uses the latest revision.
CREATE TABLE dead_letter_revisions (
    dead_letter_id   bigint NOT NULL REFERENCES dead_letters,
    revision         integer NOT NULL CHECK (revision >= 1),
    payload          bytea NOT NULL,
    operator         text NOT NULL,
    reason           text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dead_letter_id, revision)
);

-- What a replay did (resume | rerun | recompensate | resubmit), the saga's
-- status and generation when it was replayed, the payload revision used
-- (0: the original) and the outbox row that carried the command.
ALTER TABLE replays ADD COLUMN IF NOT EXISTS action text
    CHECK (action IN ('resume', 'rerun', 'recompensate', 'resubmit'));
ALTER TABLE replays ADD COLUMN IF NOT EXISTS saga_status text;
ALTER TABLE replays ADD COLUMN IF NOT EXISTS old_generation integer;
ALTER TABLE replays ADD COLUMN IF NOT EXISTS revision integer NOT NULL DEFAULT 0;
ALTER TABLE replays ADD COLUMN IF NOT EXISTS forced boolean NOT NULL DEFAULT false;

-- `list` pages newest first (id DESC) under one filter; these let the
-- first page be read from an index whatever the filter.
CREATE INDEX dead_letters_code_id ON dead_letters (error_code, id DESC);
CREATE INDEX dead_letters_class_id ON dead_letters (error_class, id DESC);
CREATE INDEX dead_letters_status_id ON dead_letters (status, id DESC);
CREATE INDEX dead_letters_tool_id ON dead_letters (tool, id DESC);
CREATE INDEX dead_letters_created ON dead_letters (created_at);
CREATE INDEX replays_created ON replays (created_at);

-- Who discarded an entry (resolution_reason says why).
ALTER TABLE dead_letters ADD COLUMN IF NOT EXISTS resolved_by text;

-- The saga_id of a JSON payload, NULL when it is not a JSON object with one.
CREATE FUNCTION sagad_payload_saga_id(p bytea) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN convert_from(p, 'UTF8')::jsonb->>'saga_id';
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END $$;

-- One replay of one dead letter (dlq-tool replay), all of it in the
-- caller's transaction: the replays row, the entry marked replayed, a new
-- saga generation (fresh idempotency keys) and the command in the outbox
-- with the lineage headers sagad-replay-of and sagad-replay-id.  What is
-- re-injected follows from the saga's state:
--   no step concerned (a submission, undecodable input): the payload (its
--     latest revision) again, to its original topic       action resubmit
--   held (forward dead letter, nothing compensated): the failed step runs
--     again; completed steps are not run again             action resume
--   compensated (everything undone): from step 0            action rerun
--   failed (compensation exhausted): the failed compensation runs again,
--     the rest continues downwards                          action recompensate
--   running / compensating / completed: refused.
-- With p_apply false nothing is written: the plan is returned (dry run).
-- outcome: replayed | would_replay | refused | missing.
CREATE FUNCTION sagad_dlq_replay(p_id bigint, p_operator text, p_reason text, p_force boolean,
                                 p_apply boolean, p_commands_topic text,
                                 OUT outcome text, OUT action text, OUT saga_id text,
                                 OUT saga_status text, OUT new_generation integer,
                                 OUT step integer, OUT new_key text, OUT replay_id bigint,
                                 OUT revision integer, OUT topic text, OUT detail text)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    d dead_letters;
    s sagas;
    body bytea;
    key bytea;
    hdrs jsonb;
    ctype text;
BEGIN
    SELECT * INTO d FROM dead_letters WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'missing';
        detail := format('no dead letter %s', p_id);
        RETURN;
    END IF;
    saga_id := d.saga_id;
    IF d.status <> 'pending' AND NOT p_force THEN
        outcome := 'refused';
        detail := format('dead letter %s is already %s; --force replays it again', p_id, d.status);
        RETURN;
    END IF;
    SELECT r.revision, r.payload INTO revision, body FROM dead_letter_revisions r
     WHERE r.dead_letter_id = p_id ORDER BY r.revision DESC LIMIT 1;
    IF NOT FOUND THEN
        revision := 0;
        body := d.payload;
    END IF;

    IF d.step_idx IS NULL THEN
        action := 'resubmit';
        topic := coalesce(d.original_topic, p_commands_topic);
        key := d.original_key;
        IF revision > 0 THEN
            saga_id := coalesce(sagad_payload_saga_id(body), d.saga_id);
            key := coalesce(convert_to(saga_id, 'UTF8'), key);
        END IF;
        SELECT sg.status INTO saga_status FROM sagas sg WHERE sg.saga_id = saga_id;
        detail := format('re-submit the payload (revision %s) to %s', revision, topic);
    ELSE
        SELECT * INTO s FROM sagas sg WHERE sg.saga_id = d.saga_id FOR UPDATE;
        IF NOT FOUND THEN
            outcome := 'refused';
            detail := format('saga %s no longer exists', d.saga_id);
            RETURN;
        END IF;
        saga_status := s.status;
        new_generation := s.generation + 1;
        topic := p_commands_topic;
        IF s.status = 'held' THEN
            action := 'resume';
            step := d.step_idx;
        ELSIF s.status = 'compensated' THEN
            action := 'rerun';
            step := 0;
        ELSIF s.status = 'failed' THEN
            action := 'recompensate';
            SELECT max(st.idx) INTO step FROM steps st
             WHERE st.saga_id = s.saga_id AND st.status = 'compensation_failed';
            IF step IS NULL THEN
                outcome := 'refused';
                detail := format('saga %s failed but no step is compensation_failed', s.saga_id);
                RETURN;
            END IF;
        ELSIF s.status IN ('running', 'compensating') THEN
            outcome := 'refused';
            detail := CASE s.status WHEN 'compensating'
                      THEN 'saga is still running its compensation; wait until it settles'
                      ELSE 'saga is still running; wait until it settles' END;
            RETURN;
        ELSE
            outcome := 'refused';
            detail := format('saga %s is %s: nothing to replay (discard the entry)', s.saga_id,
                             s.status);
            RETURN;
        END IF;
        new_key := format('%s:%s:%s:g%s', s.saga_id, step,
                          CASE action WHEN 'recompensate' THEN 'c' ELSE 'f' END, new_generation);
        detail := CASE action
            WHEN 'resume' THEN format('resume saga %s at step %s, generation %s', s.saga_id,
                                      step, new_generation)
            WHEN 'rerun' THEN format('run saga %s again from step 0, generation %s', s.saga_id,
                                     new_generation)
            ELSE format('compensate step %s of saga %s again, generation %s', step, s.saga_id,
                        new_generation) END;
    END IF;
    IF NOT p_apply THEN
        outcome := 'would_replay';
        RETURN;
    END IF;

    INSERT INTO replays (dead_letter_id, operator, reason, new_generation, new_key, payload,
                         action, saga_status, old_generation, revision, forced)
    VALUES (p_id, p_operator, p_reason, new_generation, new_key, body, action, saga_status,
            s.generation, revision, d.status <> 'pending')
    RETURNING id INTO replay_id;

    IF action = 'resubmit' THEN
        hdrs := coalesce(d.original_headers, '{}'::jsonb);
    ELSE
        IF action = 'resume' THEN
            UPDATE steps SET status = 'pending', attempts = 0, error_code = NULL,
                   updated_at = now()
             WHERE steps.saga_id = s.saga_id AND idx = step;
        ELSIF action = 'rerun' THEN
            UPDATE steps SET status = 'pending', attempts = 0, comp_attempts = 0,
                   error_code = NULL, result = NULL, idempotency_key = NULL, updated_at = now()
             WHERE steps.saga_id = s.saga_id;
        ELSE
            UPDATE steps SET status = 'compensating', comp_attempts = 0, updated_at = now()
             WHERE steps.saga_id = s.saga_id AND idx = step;
        END IF;
        UPDATE sagas SET status = CASE action WHEN 'recompensate' THEN 'compensating'
                                              ELSE 'running' END,
               generation = new_generation, retry_spent_ms = 0, version = version + 1,
               updated_at = now()
         WHERE sagas.saga_id = s.saga_id;
        ctype := CASE action WHEN 'recompensate' THEN 'step.compensate' ELSE 'step.execute' END;
        key := convert_to(s.saga_id, 'UTF8');
        body := convert_to(jsonb_build_object(
            'v', 1, 'type', ctype,
            'id', format('cmd:%s:%s:%s:g%s:a1', s.saga_id, step,
                         CASE ctype WHEN 'step.compensate' THEN 'c' ELSE 'f' END, new_generation),
            'saga_id', s.saga_id, 'step', step, 'attempt', 1,
            'generation', new_generation)::text, 'UTF8');
        hdrs := jsonb_strip_nulls(jsonb_build_object('sagad-type', ctype,
                                                     'traceparent', s.traceparent));
    END IF;
    hdrs := hdrs || jsonb_build_object('sagad-replay-of', p_id::text,
                                       'sagad-replay-id', replay_id::text);
    INSERT INTO outbox (topic, key, headers, payload) VALUES (topic, key, hdrs, body);
    UPDATE dead_letters SET status = 'replayed', resolved_at = now(),
           resolution_reason = p_reason, resolved_by = p_operator
     WHERE id = p_id;
    outcome := 'replayed';
END $$;

-- Marks a pending dead letter resolved without replay (dlq-tool discard).
-- When its saga is held (waiting for an operator before compensating), the
-- hold is released in the same transaction: the saga compensates now.
-- outcome: discarded | refused | missing; released: the hold was released.
CREATE FUNCTION sagad_dlq_discard(p_id bigint, p_operator text, p_reason text,
                                  OUT outcome text, OUT released boolean, OUT detail text)
LANGUAGE plpgsql AS $$
DECLARE
    d dead_letters;
    st text;
BEGIN
    released := false;
    SELECT * INTO d FROM dead_letters WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'missing';
        detail := format('no dead letter %s', p_id);
        RETURN;
    END IF;
    IF d.status <> 'pending' THEN
        outcome := 'refused';
        detail := format('dead letter %s is already %s', p_id, d.status);
        RETURN;
    END IF;
    UPDATE dead_letters SET status = 'discarded', resolved_at = now(),
           resolution_reason = p_reason, resolved_by = p_operator
     WHERE id = p_id;
    SELECT status INTO st FROM sagas WHERE saga_id = d.saga_id FOR UPDATE;
    IF st = 'held' THEN
        released := sagad_release_hold(d.saga_id);
    END IF;
    outcome := 'discarded';
    detail := CASE WHEN released THEN format('saga %s was held: it compensates now', d.saga_id)
                   ELSE '' END;
END $$;
