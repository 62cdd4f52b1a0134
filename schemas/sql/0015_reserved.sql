-- Reserved: version 15 belongs to the replay branch's migration
-- (0015_replay_effects.sql), not yet merged when this branch was made.
-- Migrations must run 1, 2, 3... with no gap, so this branch carries this
-- empty placeholder to reach its own 0016.  DELETE THIS FILE when merging
-- together with the real 0015 (two version-15 files are refused).
SELECT 1;
