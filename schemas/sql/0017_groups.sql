-- Parallel groups (issue 25; DESIGN section 10, docs/WORKER.md "Parallel
-- groups").  A group's members are stored as ordinary step rows, one per
-- call, in submission order; the rows of one group are consecutive and
-- name it.  The group itself has no row: its outcome (the manifest) is
-- made from its members'.
ALTER TABLE steps ADD COLUMN grp text;          -- the member's group, NULL: not a member
ALTER TABLE steps ADD COLUMN grp_policy text    -- all_or_nothing | best_effort | fail_fast
    CHECK (grp_policy IN ('all_or_nothing', 'best_effort', 'fail_fast'));
ALTER TABLE steps ADD CONSTRAINT steps_grp_policy CHECK ((grp IS NULL) = (grp_policy IS NULL));
-- When the step's forward outcome was recorded: the saga's event seq of
-- its step.succeeded (or step.failed).  Members are compensated in reverse
-- order of it (the order their effects took place), not of their index.
ALTER TABLE steps ADD COLUMN done_seq bigint;
-- A forward call of the step may be in flight: its attempt row is written
-- and its outcome is not (set with the attempt, cleared with the outcome).
-- A member that stops (fail_fast, saga.cancel) while calling is recorded
-- when its call returns; one waiting for a retry stops at once.  After a
-- crash it stays set until the step's redelivered command is decided.
ALTER TABLE steps ADD COLUMN calling boolean NOT NULL DEFAULT false;

-- A replay (sagad_dlq_replay) emits the step.execute of the first step to
-- run again.  When that step is a member of a parallel group, its
-- siblings that run again need theirs too (the worker emits every
-- member's command when a group starts, which a replay does not go
-- through): at the replay's commit, this adds the step.execute of each
-- pending member of the group, beside the replay's own, in the same
-- outbox transaction.  Deferred, so that it sees the steps as the replay
-- left them.
CREATE FUNCTION sagad_replay_group_members() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    m text[];
    sid text;
    first_idx integer;
    g text;
BEGIN
    IF NEW.action NOT IN ('resume', 'rerun') THEN
        RETURN NULL;
    END IF;
    m := regexp_match(NEW.new_key, '^(.*):([0-9]+):f:g[0-9]+$');
    IF m IS NULL THEN
        RETURN NULL;
    END IF;
    sid := m[1];
    first_idx := m[2]::integer;
    SELECT t.grp INTO g FROM steps t WHERE t.saga_id = sid AND t.idx = first_idx;
    IF g IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO outbox (topic, key, headers, payload)
    SELECT o.topic, o.key, o.headers,
           convert_to(jsonb_build_object(
               'v', 1, 'type', 'step.execute',
               'id', format('cmd:%s:%s:f:g%s:a1', sid, t.idx, NEW.new_generation),
               'saga_id', sid, 'step', t.idx, 'attempt', 1,
               'generation', NEW.new_generation)::text, 'UTF8')
      FROM steps t,
           (SELECT x.topic, x.key, x.headers FROM outbox x
             WHERE x.headers ->> 'sagad-replay-id' = NEW.id::text LIMIT 1) o
     WHERE t.saga_id = sid AND t.grp = g AND t.idx <> first_idx AND t.status = 'pending'
     ORDER BY t.idx;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER replays_group_members AFTER INSERT ON replays
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION sagad_replay_group_members();
