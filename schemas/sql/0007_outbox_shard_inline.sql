-- An outbox row's shard was set by a plpgsql BEFORE INSERT trigger, run for
-- every row: about 6 us a row, a tenth of the worker's PostgreSQL time per
-- saga step (2.7 outbox rows a step).  The rule now lives in one SQL
-- function.  sagad-worker writes the shard in its INSERT with it; the
-- trigger fills only rows inserted without one (shard -1, the new default):
-- the relay's timer moves, dlq-tool, an older worker during a rolling
-- upgrade.  Both read relay_settings in the inserting statement, so a key's
-- rows land in one shard whoever writes them.
CREATE FUNCTION sagad_outbox_shard_of(k bytea, shards integer) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN shards > 1 AND k IS NOT NULL
                THEN ((hashtext(encode(k, 'hex'))::bigint & 2147483647) % shards)::integer
                ELSE 0 END
$$;

-- The count goes through a variable: with a subquery as its argument the
-- function is not inlined and costs three times the old trigger.
CREATE OR REPLACE FUNCTION sagad_outbox_shard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    SELECT shards INTO n FROM relay_settings;
    NEW.shard := sagad_outbox_shard_of(NEW.key, n);
    RETURN NEW;
END $$;

ALTER TABLE outbox ALTER COLUMN shard SET DEFAULT -1;
DROP TRIGGER outbox_shard ON outbox;
CREATE TRIGGER outbox_shard BEFORE INSERT ON outbox
    FOR EACH ROW WHEN (NEW.shard < 0) EXECUTE FUNCTION sagad_outbox_shard();
