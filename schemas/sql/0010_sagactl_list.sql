-- sagactl list (issue 26): sagas newest first, a page at a time by keyset
-- on (created_at, saga_id).  Without this index every page sorted the whole
-- table.  Neither column is ever updated, but a saga's updates are not
-- HOT (sagas_status indexes updated_at), so each adds an entry here too:
-- a cost on the worker's write path, one index more.  The filters (--status, --name, --since,
-- --stuck) are applied while walking it; --stuck alone is served by
-- sagas_status (status, updated_at) of 0001.
CREATE INDEX sagas_created ON sagas (created_at, saga_id);
