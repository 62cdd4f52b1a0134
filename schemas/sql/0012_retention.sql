-- Retention (issue 28): the janitor in the active relay removes finished
-- work past its horizon (docs/OPERATIONS.md, "Retention").  What it reads
-- must be an index range, never a scan of a table that holds weeks of rows.

-- Handled dead letters by the time they were resolved: the janitor's batch
-- and the age of the oldest one.  Pending entries, never removed, stay out.
CREATE INDEX dead_letters_resolved ON dead_letters (resolved_at) WHERE status <> 'pending';

-- The builtin ledger by its last call.
CREATE INDEX builtin_ledger_last ON builtin_ledger (last_at);

-- The janitor deletes in batches all day; autovacuum's default threshold
-- (a fifth of the table dead) lets a table carry that much garbage before
-- it is cleaned, and lets the first pass of a large backlog leave a fifth
-- of the table to be scanned around.  At 5% (and as much after inserts,
-- which also sets the visibility map the index-only reads use) the space
-- freed is reused by the next inserts, so the tables stop growing once
-- their horizon is reached (measured by make soak).
ALTER TABLE sagas SET (autovacuum_vacuum_scale_factor = 0.05,
                       autovacuum_vacuum_insert_scale_factor = 0.05);
ALTER TABLE steps SET (autovacuum_vacuum_scale_factor = 0.05,
                       autovacuum_vacuum_insert_scale_factor = 0.05);
ALTER TABLE attempts SET (autovacuum_vacuum_scale_factor = 0.05,
                          autovacuum_vacuum_insert_scale_factor = 0.05);
