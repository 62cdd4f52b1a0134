-- Placeholder, on branch h-caps only: version 0021 belongs to another
-- branch's migration, and versions must run with no gap (sg_migrate.c).
-- Delete this file when that branch's 0021 is merged.
SELECT 1;
