-- The outbox through the write-ahead log (issue 40; docs/RELAY.md, "The
-- WAL source").
--
-- With relay_settings.source = 'wal', a row inserted into the outbox is
-- not stored: a BEFORE INSERT trigger writes it into the WAL as a
-- transactional logical decoding message (pg_logical_emit_message, prefix
-- 'sagad.outbox') and drops the row.  The WAL relay reads those messages
-- through a logical replication slot (pgoutput, messages 'true'), in
-- commit order, and publishes them: no heap or index write, no DELETE and
-- no vacuum on the hot path.  Every writer (the worker, the relay's timer
-- move, sagad_dlq_replay, sagad_outbox_republish, an operator's INSERT)
-- goes through the same trigger, so none of them has to know the source.
--
-- The route is decided once per transaction (cached in the transaction's
-- setting sagad.outbox_route): the WAL when the source is 'wal' AND the
-- slot it names exists and can still be read (not invalidated past
-- max_slot_wal_keep_size); the table otherwise.  So a primary that lost the
-- slot (a PostgreSQL 15 failover: logical slots are not replicated) keeps
-- the messages in the table, where they wait, instead of writing them into
-- a WAL no one decodes; the WAL relay moves them into the WAL once its
-- slot exists again (sagad_outbox_to_wal below).
--
-- The slot itself is made by the WAL relay (CREATE_REPLICATION_SLOT on its
-- replication connection, which needs the REPLICATION attribute this
-- migration's owner need not have), right before it switches the source:
-- a slot made here, with no relay to read it, would hold back the WAL and
-- the catalog horizon for ever.  The publication (no tables: messages
-- only) is made here.
--
-- Who may emit: pg_logical_emit_message is executable by PUBLIC in a
-- stock PostgreSQL, so any login could write a message the relay would
-- sign and publish.  Revoking it needs a superuser (deploy/local/pg.sh
-- does; docs/OPERATIONS.md gives the statements); the WAL relay refuses to
-- start while PUBLIC may still call it.  The trigger function is SECURITY
-- DEFINER, owned by the schema's owner, the one role that keeps EXECUTE.

ALTER TABLE relay_settings
    ADD COLUMN source text NOT NULL DEFAULT 'table' CHECK (source IN ('table', 'wal')),
    ADD COLUMN wal_slot text,                -- the slot the WAL source is read from
    ADD COLUMN source_changed_at timestamptz,
    ADD COLUMN source_changed_lsn pg_lsn;    -- the WAL position of the last switch

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'sagad_outbox') THEN
        CREATE PUBLICATION sagad_outbox;
    END IF;
END $$;

-- One message's content: 'SGO1', the outbox id (int8), then topic, key
-- (length -1: none) and headers (JSON text), each an int4 length and its
-- bytes, then the payload to the end.  Decoded by lib/infra/sg_walmsg.c.
CREATE FUNCTION sagad_outbox_frame(p_id bigint, p_topic text, p_key bytea, p_headers jsonb,
                                   p_payload bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
    SELECT '\x53474f31'::bytea || int8send(p_id)
           || int4send(octet_length(convert_to(p_topic, 'UTF8'))) || convert_to(p_topic, 'UTF8')
           || int4send(coalesce(octet_length(p_key), -1)) || coalesce(p_key, '\x'::bytea)
           || int4send(octet_length(convert_to(p_headers::text, 'UTF8')))
           || convert_to(p_headers::text, 'UTF8')
           || p_payload
$$;

-- 'wal' or 'table', for this transaction.
CREATE FUNCTION sagad_outbox_route() RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    route text := current_setting('sagad.outbox_route', true);
BEGIN
    IF route IS NULL OR route = '' THEN
        SELECT CASE WHEN s.source = 'wal' AND EXISTS (
                        SELECT 1 FROM pg_replication_slots r
                         WHERE r.slot_name = s.wal_slot AND r.database = current_database()
                           AND r.wal_status IS DISTINCT FROM 'lost')
                    THEN 'wal' ELSE 'table' END
          INTO route FROM relay_settings s;
        PERFORM set_config('sagad.outbox_route', route, true);
    END IF;
    RETURN route;
END $$;

CREATE FUNCTION sagad_outbox_emit() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF sagad_outbox_route() = 'table' THEN
        RETURN NEW;
    END IF;
    PERFORM pg_logical_emit_message(true, 'sagad.outbox',
        sagad_outbox_frame(NEW.id, NEW.topic, NEW.key, NEW.headers, NEW.payload));
    RETURN NULL;
END $$;
-- Named to fire before outbox_shard (BEFORE triggers run in name order):
-- a row that goes to the WAL needs no shard.
CREATE TRIGGER outbox_emit BEFORE INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION sagad_outbox_emit();

-- The WAL relay's switch, and its sweep: under a lock that waits for every
-- writer of the outbox to finish and holds new ones back until it commits,
-- sets the source to 'wal' from the slot p_slot (which must exist), then
-- writes every row still in the table into the WAL, in (tx, id) order,
-- and deletes them.  A row a table relay published but had not yet
-- deleted is published again (a duplicate, with the same message id).
-- Returns the number of rows moved.  With nothing to move and the source
-- already set, it takes no lock.
CREATE FUNCTION sagad_outbox_to_wal(p_slot text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    o outbox;
    n bigint := 0;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_replication_slots
                    WHERE slot_name = p_slot AND database = current_database()
                      AND plugin = 'pgoutput' AND wal_status IS DISTINCT FROM 'lost') THEN
        RAISE EXCEPTION 'no pgoutput replication slot % in database %', p_slot,
            current_database() USING ERRCODE = 'undefined_object';
    END IF;
    IF (SELECT source = 'wal' AND wal_slot = p_slot FROM relay_settings)
       AND NOT EXISTS (SELECT 1 FROM outbox) THEN
        RETURN 0;
    END IF;
    LOCK TABLE outbox IN EXCLUSIVE MODE;
    UPDATE relay_settings SET source = 'wal', wal_slot = p_slot,
           source_changed_at = now(), source_changed_lsn = pg_current_wal_lsn()
     WHERE source <> 'wal' OR wal_slot IS DISTINCT FROM p_slot;
    FOR o IN SELECT * FROM outbox ORDER BY tx, id LOOP
        PERFORM pg_logical_emit_message(true, 'sagad.outbox',
            sagad_outbox_frame(o.id, o.topic, o.key, o.headers, o.payload));
        n := n + 1;
    END LOOP;
    DELETE FROM outbox;
    RETURN n;
END $$;

-- The WAL relay's heartbeat: a message of its own prefix carrying the
-- clock (milliseconds since 1970), written every few seconds.  The relay
-- reads it back from the stream; how long the newest one written has not
-- been read is how far publishing lags (sagad_outbox_oldest_age_seconds,
-- shard "wal").  Transactional, so it is decoded in commit order.
CREATE FUNCTION sagad_outbox_wal_heartbeat() RETURNS pg_lsn
LANGUAGE sql SECURITY DEFINER AS $$
    SELECT pg_logical_emit_message(true, 'sagad.heartbeat',
                                   (extract(epoch FROM clock_timestamp()) * 1000)::bigint::text)
$$;

-- Back to the table.  Messages already in the WAL are still the WAL
-- relay's to publish: keep it running until `sagad-relay status` shows
-- its slot caught up (docs/RELAY.md).
CREATE FUNCTION sagad_outbox_to_table() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    LOCK TABLE outbox IN EXCLUSIVE MODE;
    UPDATE relay_settings SET source = 'table', source_changed_at = now(),
           source_changed_lsn = pg_current_wal_lsn();
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION sagad_outbox_emit() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION sagad_outbox_to_wal(text) SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION sagad_outbox_to_table() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION sagad_outbox_route() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION sagad_outbox_wal_heartbeat() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION sagad_outbox_frame(bigint, text, bytea, jsonb, bytea) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
-- The trigger needs no EXECUTE of the inserting role (PostgreSQL checks
-- it when the trigger is made, not when it fires).
REVOKE EXECUTE ON FUNCTION sagad_outbox_to_wal(text), sagad_outbox_to_table(), sagad_outbox_emit(),
    sagad_outbox_wal_heartbeat() FROM PUBLIC;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sagad_runtime') THEN
        GRANT EXECUTE ON FUNCTION sagad_outbox_to_wal(text), sagad_outbox_to_table(),
            sagad_outbox_wal_heartbeat() TO sagad_runtime;
    END IF;
END $$;
