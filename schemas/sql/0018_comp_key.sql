-- A compensation whose attempt may have taken effect keeps its key
-- (issue 35 item 1; docs/DLQ.md, "What a replay does"); and a replayed
-- saga that failed while it was being cancelled ends cancelled (item 7).
--
-- A compensation's idempotency key was always the saga's generation's, so
-- a replay of a failed saga (action recompensate) ran the failed
-- compensation again under the new generation's key.  When its first
-- attempt timed out but went through (a refund paid, the answer lost), the
-- second refund was paid too.  The worker now records, on the step, the
-- generation of the compensation key under which an attempt may have
-- taken effect (a timeout, a request that went out unanswered, a crash
-- mid-call), and uses that key for every later attempt of the
-- compensation, across replays.  The replay reports the key it will use.
ALTER TABLE steps ADD COLUMN comp_key_generation integer;

-- The compensation key a recompensate replay runs under: the kept one, or
-- the new generation's.
CREATE FUNCTION sagad_comp_key(st steps, new_generation integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT format('%s:%s:c:g%s', st.saga_id, st.idx,
                  coalesce(st.comp_key_generation, new_generation))
$$;

-- sagad_dlq_replay (0015) names the key in its plan (kept), in new_key and
-- in the replays row.  It is wrapped: the function of 0015 becomes
-- sagad_dlq_replay_0015, callable only by its owner; the new
-- sagad_dlq_replay, of the same signature (so 0015's grant to the operator
-- role applies to it), calls it and, for a recompensate replay of a step
-- whose compensation key is kept, reports that key, and writes it into
-- the replays row the inner function wrote.
ALTER FUNCTION sagad_dlq_replay(bigint, text, text, boolean, boolean, text, text)
    RENAME TO sagad_dlq_replay_0015;
REVOKE EXECUTE ON FUNCTION sagad_dlq_replay_0015(bigint, text, text, boolean, boolean, text, text)
    FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_operator') THEN
        REVOKE EXECUTE ON FUNCTION
            sagad_dlq_replay_0015(bigint, text, text, boolean, boolean, text, text)
            FROM sagad_operator;
    END IF;
END $$;

-- The kept plan with the compensation's key and why.
CREATE FUNCTION sagad_kept_comp_key(kept jsonb, idx integer, new_key text) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_agg(CASE WHEN (e ->> 'step')::integer = idx
                                   THEN e || jsonb_build_object(
                                       'key', new_key,
                                       'how', 'its compensation runs again under its old key '
                                              '(an attempt may have taken effect)')
                                   ELSE e END), '[]'::jsonb)
      FROM jsonb_array_elements(kept) e
$$;

CREATE FUNCTION sagad_dlq_replay(p_id bigint, p_operator text, p_reason text, p_force boolean,
                                 p_apply boolean, p_commands_topic text, p_rerun_from text,
                                 OUT outcome text, OUT action text, OUT saga_id text,
                                 OUT saga_status text, OUT new_generation integer,
                                 OUT step integer, OUT new_key text, OUT replay_id bigint,
                                 OUT revision integer, OUT topic text, OUT detail text,
                                 OUT rerun_from integer, OUT repeats jsonb, OUT kept jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    r record;
    st steps;
BEGIN
    SELECT * INTO r FROM sagad_dlq_replay_0015(p_id, p_operator, p_reason, p_force, p_apply,
                                               p_commands_topic, p_rerun_from);
    outcome := r.outcome; action := r.action; saga_id := r.saga_id;
    saga_status := r.saga_status; new_generation := r.new_generation; step := r.step;
    new_key := r.new_key; replay_id := r.replay_id; revision := r.revision; topic := r.topic;
    detail := r.detail; rerun_from := r.rerun_from; repeats := r.repeats; kept := r.kept;
    IF r.action = 'recompensate' AND r.outcome IN ('replayed', 'would_replay') THEN
        SELECT * INTO st FROM steps t WHERE t.saga_id = r.saga_id AND t.idx = r.step;
        IF FOUND AND st.comp_key_generation IS NOT NULL THEN
            new_key := sagad_comp_key(st, r.new_generation);
            kept := sagad_kept_comp_key(r.kept, r.step, new_key);
            detail := replace(r.detail, 'again, generation',
                              'again under its old key ' || new_key || ', generation');
            UPDATE replays SET new_key = sagad_dlq_replay.new_key,
                               kept = sagad_dlq_replay.kept
             WHERE id = r.replay_id;
        END IF;
        -- A saga that failed while it was being cancelled (its history
        -- holds an accepted saga.cancel) finishes its compensation as a
        -- cancellation, and ends cancelled, not compensated.
        IF EXISTS (SELECT 1 FROM saga_controls c WHERE c.saga_id = r.saga_id
                      AND c.command = 'saga.cancel' AND c.outcome = 'accepted') THEN
            IF r.outcome = 'replayed' THEN
                UPDATE sagas SET status = 'cancelling' WHERE sagas.saga_id = r.saga_id;
            END IF;
            detail := detail || '; it was cancelled: it ends cancelled';
        END IF;
    END IF;
END $$;
REVOKE EXECUTE ON FUNCTION sagad_dlq_replay(bigint, text, text, boolean, boolean, text, text)
    FROM PUBLIC;

SELECT sagad_grant_roles();
