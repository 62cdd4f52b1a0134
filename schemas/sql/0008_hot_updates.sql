-- Room for HOT updates.  A saga step's row in steps is updated twice
-- (running, then its outcome) and its attempt row once (finished), right
-- after they are inserted into pages the default fillfactor (100) packs
-- full: every update then wrote its new version to another page and a new
-- entry into every index.  With free space on the page and no indexed
-- column changed, PostgreSQL updates in place (a heap-only tuple).
-- Measured in the worker benchmark's backlog: the steps UPDATE from 11.6
-- to 7.3 us a row, the attempts UPDATE from 13 to 11.5.  The settings
-- apply to pages written from now on.
ALTER TABLE steps SET (fillfactor = 50);
ALTER TABLE attempts SET (fillfactor = 50);
ALTER TABLE sagas SET (fillfactor = 70);

-- Setting finished_at changed this partial index's predicate, which rules
-- out HOT for every attempt row.  Nothing reads it: the worker finds an
-- attempt's rows by attempts_step (saga, step, phase, generation,
-- attempt), crash-loop detection included.
DROP INDEX attempts_unfinished;
