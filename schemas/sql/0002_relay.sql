-- sagad-relay: outbox shards, per-shard cursors, wake-up notifications.

-- The shard count lives in the database so every writer and relay agrees on
-- it.  Change it only while the outbox is empty (sagad-relay refuses to
-- start when its relay.shards differs from this and rows are waiting).
CREATE TABLE relay_settings (
    id      boolean PRIMARY KEY DEFAULT true CHECK (id),
    shards  integer NOT NULL DEFAULT 1 CHECK (shards BETWEEN 1 AND 256)
);
INSERT INTO relay_settings DEFAULT VALUES;

ALTER TABLE outbox ADD COLUMN shard integer NOT NULL DEFAULT 0;
DROP INDEX outbox_order;
-- The relay's read is an index range scan on (shard, tx, id).
CREATE INDEX outbox_order ON outbox (shard, tx, id);
-- Rows are deleted right after publishing; keep vacuum close behind.
ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0.01,
                        autovacuum_vacuum_insert_scale_factor = 0.01);

-- A row's shard is a hash of its key, so one key (one saga) stays in one
-- shard and keeps its order.
CREATE FUNCTION sagad_outbox_shard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    SELECT shards INTO n FROM relay_settings;
    IF n > 1 AND NEW.key IS NOT NULL THEN
        NEW.shard := (hashtext(encode(NEW.key, 'hex'))::bigint & 2147483647) % n;
    ELSE
        NEW.shard := 0;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER outbox_shard BEFORE INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION sagad_outbox_shard();

-- One notification per inserting statement wakes the relays at once;
-- their poll interval covers a lost one.
CREATE FUNCTION sagad_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sagad_outbox', '');
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION sagad_outbox_notify();

-- Per-shard cursor: the (tx, id) of the last row acknowledged by Kafka.
-- holder/heartbeat_at say which relay instance is active (for status).
CREATE TABLE relay_cursors (
    shard         integer PRIMARY KEY,
    tx            xid8 NOT NULL DEFAULT '0',
    id            bigint NOT NULL DEFAULT 0,
    published     bigint NOT NULL DEFAULT 0,
    holder        text,
    heartbeat_at  timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- How long committed rows have waited behind an older running transaction
-- (the xmin horizon), as last seen by the active relay.
ALTER TABLE relay_cursors ADD COLUMN xmin_blocked_ms bigint NOT NULL DEFAULT 0;
