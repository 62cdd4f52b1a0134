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
