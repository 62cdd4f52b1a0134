-- PLACEHOLDER on branch `dlq` only: migration 5 belongs to the dead-letter
-- worker change (branch `dlworker`), which replaces this file on merge.  It
-- exists so that versions run 1..6 without a gap on this branch.
SELECT 1;
