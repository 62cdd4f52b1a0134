-- Where a saga's saga.start was read: "<partition>:<offset>" of the commands
-- topic.  A saga.start that comes again for an existing saga with the same
-- definition is either that very message read again (after a partition
-- changed hands, the messages past the stored offset come back) or a
-- producer sending the submission again; only the second is answered
-- (saga.duplicate), and this column tells them apart.  NULL for sagas
-- accepted before this migration: their duplicates are answered.
ALTER TABLE sagas ADD COLUMN origin text;
