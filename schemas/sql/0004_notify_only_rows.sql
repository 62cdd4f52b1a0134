-- The outbox NOTIFY trigger of 0002 fired for every INSERT statement, also
-- for the relay's own timer move when no timer was due (INSERT ... SELECT of
-- zero rows).  That notification woke the relay at once, which moved timers
-- again: an idle relay spun, costing a third of a CPU core in PostgreSQL.
-- Notify only when the statement inserted rows.
DROP TRIGGER outbox_notify ON outbox;

CREATE OR REPLACE FUNCTION sagad_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows) THEN
        PERFORM pg_notify('sagad_outbox', '');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION sagad_outbox_notify();
