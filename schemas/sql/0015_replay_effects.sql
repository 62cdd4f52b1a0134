-- Replay semantics that cannot repeat an effect (issue 24 item 4;
-- docs/DLQ.md, "What a replay does").
--
-- A replay used to run a compensated saga again from step 0 under a new
-- generation, so every call got a fresh idempotency key: a step whose
-- effect was never undone (irreversible, idempotent or read: marked
-- skipped by the compensation, not compensated) was made a second time.
-- Now each step's effect is classified before anything is reset:
--   stands    succeeded, compensation_failed, or skipped after it succeeded
--   possible  unknown, or skipped after an attempt that may have taken effect
--   undone    compensated
--   none      pending, failed, skipped before it ran
-- and a replay that re-runs steps (of a held or a compensated saga)
--   keeps a step whose effect stands `succeeded` with its result: not
--     called again;
--   runs a step whose effect is possible again under its OLD key
--     (steps.key_generation), so the downstream answers from its record if
--     the first call took effect;
--   runs every other step under the new generation's fresh key;
-- unless the operator names a step with --rerun-from: from that step on
-- every step runs under a fresh key, and the effects that stand there are
-- listed as repeated (in the plan, the dry run and the replays row).

-- What a replay kept and what it repeated, and the step the operator asked
-- to re-run from (NULL: none), kept with the replay.
ALTER TABLE replays ADD COLUMN rerun_from integer;
ALTER TABLE replays ADD COLUMN repeats jsonb;
ALTER TABLE replays ADD COLUMN kept jsonb;

-- A step's effect as the tables show it: stands | possible | undone | none.
-- A skipped step was either never called (pending when an earlier step
-- failed) or called and passed over by the compensation (it has none): its
-- stored result, else its last forward attempt under its key, tells which.
CREATE FUNCTION sagad_step_effect(st steps) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    last_status text;
BEGIN
    IF st.status IN ('succeeded', 'compensation_failed', 'compensating') THEN
        RETURN 'stands';
    ELSIF st.status IN ('unknown', 'running') THEN
        RETURN 'possible';
    ELSIF st.status = 'compensated' THEN
        RETURN 'undone';
    ELSIF st.status <> 'skipped' THEN
        RETURN 'none';
    END IF;
    IF st.result IS NOT NULL THEN
        RETURN 'stands';
    END IF;
    IF st.idempotency_key IS NULL THEN
        RETURN 'none';
    END IF;
    SELECT a.status INTO last_status FROM attempts a
     WHERE a.saga_id = st.saga_id AND a.step_idx = st.idx AND a.phase = 'forward'
       AND a.idempotency_key = st.idempotency_key
     ORDER BY a.id DESC LIMIT 1;
    -- No attempt row left, or one that did not end ok: it may have taken
    -- effect; the old key is the safe way to call it again.
    RETURN CASE WHEN last_status = 'ok' THEN 'stands' ELSE 'possible' END;
END $$;

-- The generation of the key a step's last forward call used: the one its
-- key (steps.idempotency_key) names, else the one an earlier replay kept,
-- else the saga's.
CREATE FUNCTION sagad_step_key_generation(st steps, saga_generation integer) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(substring(st.idempotency_key FROM ':f:g([0-9]+)$')::integer,
                    st.key_generation, saga_generation)
$$;

DROP FUNCTION sagad_dlq_replay(bigint, text, text, boolean, boolean, text);

-- One replay of one dead letter (dlq-tool replay), all of it in the
-- caller's transaction: the replays row, the entry marked replayed, a new
-- saga generation and the command in the outbox with the lineage headers
-- sagad-replay-of and sagad-replay-id.  What is re-injected follows from
-- the saga's state (docs/DLQ.md, "What a replay does"):
--   no step concerned (a submission, undecodable input): the payload (its
--     latest revision) again, to its original topic       action resubmit
--   held (forward dead letter, nothing compensated): from the failed step;
--     steps whose effect stands are kept                   action resume
--   compensated: every step whose effect does not stand runs again (see
--     the top of this file)                                action rerun
--   failed (compensation exhausted): the failed compensation runs again,
--     the rest continues downwards                         action recompensate
--   running / compensating / completed: refused.
-- p_rerun_from (a step's index or name, NULL: none) re-runs every step from
-- it on under fresh keys, standing effects included (held or compensated
-- sagas only; action rerun).  repeats: the steps whose effect stands or may
-- stand and that are called again under a fresh key; kept: those that are
-- not called again, or called under their old key.  Each element is
-- {step, name, tool, status, effect, key, how}.
-- With p_apply false nothing is written: the plan is returned (dry run).
-- outcome: replayed | would_replay | refused | missing.
CREATE FUNCTION sagad_dlq_replay(p_id bigint, p_operator text, p_reason text, p_force boolean,
                                 p_apply boolean, p_commands_topic text, p_rerun_from text,
                                 OUT outcome text, OUT action text, OUT saga_id text,
                                 OUT saga_status text, OUT new_generation integer,
                                 OUT step integer, OUT new_key text, OUT replay_id bigint,
                                 OUT revision integer, OUT topic text, OUT detail text,
                                 OUT rerun_from integer, OUT repeats jsonb, OUT kept jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_variable
DECLARE
    d dead_letters;
    s sagas;
    st steps;
    body bytea;
    key bytea;
    hdrs jsonb;
    ctype text;
    effect text;
    key_gen integer;
    plan jsonb := '[]';
    item jsonb;
BEGIN
    repeats := '[]';
    kept := '[]';
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
        IF p_rerun_from IS NOT NULL THEN
            outcome := 'refused';
            detail := format('--rerun-from: dead letter %s is a submission, not a step of a '
                             'saga; replay it without --rerun-from', p_id);
            RETURN;
        END IF;
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
        IF s.status IN ('running', 'compensating') THEN
            outcome := 'refused';
            detail := CASE s.status WHEN 'compensating'
                      THEN 'saga is still running its compensation; wait until it settles'
                      ELSE 'saga is still running; wait until it settles' END;
            RETURN;
        ELSIF s.status NOT IN ('held', 'compensated', 'failed') THEN
            outcome := 'refused';
            detail := format('saga %s is %s: nothing to replay (discard the entry)', s.saga_id,
                             s.status);
            RETURN;
        END IF;
        IF p_rerun_from IS NOT NULL THEN
            IF s.status = 'failed' THEN
                outcome := 'refused';
                detail := format('--rerun-from: saga %s is failed (a compensation did not '
                                 'happen): replay it without --rerun-from so the compensation '
                                 'finishes, then replay the entry again with --force '
                                 '--rerun-from', s.saga_id);
                RETURN;
            END IF;
            SELECT t.idx INTO rerun_from FROM steps t
             WHERE t.saga_id = s.saga_id
               AND (t.name = p_rerun_from OR (p_rerun_from ~ '^[0-9]{1,9}$'
                                               AND t.idx = p_rerun_from::integer));
            IF rerun_from IS NULL THEN
                outcome := 'refused';
                detail := format('--rerun-from %s: saga %s has no such step (its steps: %s); '
                                 'give a step index or name', p_rerun_from, s.saga_id,
                                 (SELECT string_agg(t.idx || ' ' || t.name, ', ' ORDER BY t.idx)
                                    FROM steps t WHERE t.saga_id = s.saga_id));
                RETURN;
            END IF;
        END IF;

        IF s.status = 'failed' THEN
            action := 'recompensate';
            SELECT max(t.idx) INTO step FROM steps t
             WHERE t.saga_id = s.saga_id AND t.status = 'compensation_failed';
            IF step IS NULL THEN
                outcome := 'refused';
                detail := format('saga %s failed but no step is compensation_failed', s.saga_id);
                RETURN;
            END IF;
        ELSE
            action := CASE WHEN rerun_from IS NOT NULL THEN 'rerun'
                           WHEN s.status = 'held' THEN 'resume' ELSE 'rerun' END;
        END IF;

        -- The plan, step by step: what each step becomes and why.
        FOR st IN SELECT * FROM steps t WHERE t.saga_id = s.saga_id ORDER BY t.idx LOOP
            effect := sagad_step_effect(st);
            key_gen := NULL;
            item := jsonb_build_object('step', st.idx, 'name', st.name, 'tool', st.tool,
                                       'status', st.status, 'effect', effect);
            IF action = 'recompensate' THEN
                IF st.idx = step THEN
                    kept := kept || (item || jsonb_build_object(
                        'key', format('%s:%s:c:g%s', s.saga_id, st.idx, new_generation),
                        'how', 'its compensation runs again under the new key'));
                ELSIF effect IN ('stands', 'possible') THEN
                    kept := kept || (item || jsonb_build_object(
                        'key', st.idempotency_key, 'how', 'not called forward again'));
                END IF;
                CONTINUE;
            END IF;
            IF rerun_from IS NOT NULL AND st.idx >= rerun_from THEN
                -- The operator asked: a fresh key, whatever stands.
                IF effect IN ('stands', 'possible') THEN
                    repeats := repeats || (item || jsonb_build_object(
                        'key', format('%s:%s:f:g%s', s.saga_id, st.idx, new_generation),
                        'old_key', st.idempotency_key,
                        'how', 'called again under a new key (--rerun-from)'));
                END IF;
                plan := plan || jsonb_build_object('idx', st.idx, 'dest', 'pending');
            ELSIF effect = 'stands' THEN
                kept := kept || (item || jsonb_build_object(
                    'key', st.idempotency_key, 'how', 'not called again'));
                plan := plan || jsonb_build_object('idx', st.idx, 'dest', 'succeeded');
            ELSIF effect = 'possible' THEN
                key_gen := sagad_step_key_generation(st, s.generation);
                kept := kept || (item || jsonb_build_object(
                    'key', format('%s:%s:f:g%s', s.saga_id, st.idx, key_gen),
                    'how', 'called again under its old key'));
                plan := plan || jsonb_build_object('idx', st.idx, 'dest', 'pending',
                                                   'key_generation', key_gen);
            ELSE
                plan := plan || jsonb_build_object('idx', st.idx, 'dest', 'pending');
            END IF;
            IF step IS NULL AND (plan -> -1 ->> 'dest') = 'pending' THEN
                step := st.idx;
                new_key := format('%s:%s:f:g%s', s.saga_id, st.idx,
                                  coalesce(key_gen, new_generation));
            END IF;
        END LOOP;

        IF action = 'recompensate' THEN
            new_key := format('%s:%s:c:g%s', s.saga_id, step, new_generation);
            detail := format('compensate step %s of saga %s again, generation %s', step,
                             s.saga_id, new_generation);
        ELSIF step IS NULL THEN
            outcome := 'refused';
            detail := format('saga %s: every step''s effect stands, nothing would run again; '
                             'discard the entry, or name the step to repeat with --rerun-from',
                             s.saga_id);
            RETURN;
        ELSIF action = 'resume' THEN
            detail := format('resume saga %s at step %s, generation %s', s.saga_id, step,
                             new_generation);
        ELSE
            detail := format('run saga %s again from step %s, generation %s', s.saga_id, step,
                             new_generation);
        END IF;
        detail := detail || format('; %s kept, %s repeated', jsonb_array_length(kept),
                                   jsonb_array_length(repeats));
    END IF;
    IF NOT p_apply THEN
        outcome := 'would_replay';
        RETURN;
    END IF;

    INSERT INTO replays (dead_letter_id, operator, reason, new_generation, new_key, payload,
                         action, saga_status, old_generation, revision, forced, rerun_from,
                         repeats, kept)
    VALUES (p_id, p_operator, p_reason, new_generation, new_key, body, action, saga_status,
            s.generation, revision, d.status <> 'pending', rerun_from,
            CASE WHEN action <> 'resubmit' THEN repeats END,
            CASE WHEN action <> 'resubmit' THEN kept END)
    RETURNING id INTO replay_id;

    IF action = 'resubmit' THEN
        hdrs := coalesce(d.original_headers, '{}'::jsonb);
    ELSE
        IF action = 'recompensate' THEN
            UPDATE steps SET status = 'compensating', comp_attempts = 0, updated_at = now()
             WHERE steps.saga_id = s.saga_id AND idx = step;
        ELSE
            -- A kept step keeps its result, key and counts; a step that runs
            -- again forgets them (its key is the new generation's, or the
            -- kept generation's).
            UPDATE steps t SET status = 'succeeded', updated_at = now()
              FROM jsonb_to_recordset(plan) AS p(idx integer, dest text)
             WHERE t.saga_id = s.saga_id AND t.idx = p.idx AND p.dest = 'succeeded'
               AND t.status <> 'succeeded';
            UPDATE steps t SET status = 'pending', attempts = 0, comp_attempts = 0,
                   error_code = NULL, result = NULL,
                   idempotency_key = CASE WHEN p.key_generation IS NOT NULL
                                          THEN t.idempotency_key END,
                   key_generation = p.key_generation, updated_at = now()
              FROM jsonb_to_recordset(plan) AS p(idx integer, dest text, key_generation integer)
             WHERE t.saga_id = s.saga_id AND t.idx = p.idx AND p.dest = 'pending';
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
REVOKE EXECUTE ON FUNCTION sagad_dlq_replay(bigint, text, text, boolean, boolean, text, text)
    FROM PUBLIC;

-- 0013's grants with the new replay function (migrate calls this on every
-- run).
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
        GRANT SELECT ON relay_settings, sagad_schema_migrations TO sagad_runtime;
        EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %s TO sagad_runtime', s);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_operator') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %s TO sagad_operator', s);
        EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %s TO sagad_operator', s);
        GRANT EXECUTE ON FUNCTION
            sagad_dlq_replay(bigint, text, text, boolean, boolean, text, text),
            sagad_dlq_discard(bigint, text, text),
            sagad_dlq_edit(bigint, text, text, text) TO sagad_operator;
    END IF;
END $$;
SELECT sagad_grant_roles();
