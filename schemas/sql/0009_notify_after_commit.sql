-- The outbox NOTIFY moves out of the worker's commits.
--
-- A transaction that has called NOTIFY takes one lock for the whole
-- database cluster when it commits and holds it through its WAL flush
-- (PostgreSQL keeps notifications in commit order that way).  Every
-- worker transaction inserts outbox rows, so with the statement trigger
-- of 0004 the worker's two connections, and every other notifying writer,
-- committed one at a time, fsync included.  The trigger's transition
-- table (every inserted row copied, to learn that there was one) and its
-- plpgsql call were a further twentieth of the worker's backend.
--
-- Now a session that sets sagad.outbox_notify = off (the worker, at
-- connect) is skipped by the trigger: it sends pg_notify('sagad_outbox',
-- '') itself after its COMMIT, in a transaction of its own.  That one
-- writes only its commit record and, having written nothing before it,
-- does not wait for a WAL flush: it holds the lock for microseconds.
-- Every other writer (the relay moving due timers, dlq-tool,
-- sagad_dlq_replay, an operator's INSERT) is notified for at its commit,
-- as before.  The trigger is per row, so an INSERT of no rows (the
-- relay's timer move on most wake-ups, the reason for 0004) notifies
-- nobody, without a transition table.  pg_notify sends one notification
-- per transaction however many rows call it.
DROP TRIGGER outbox_notify ON outbox;

CREATE OR REPLACE FUNCTION sagad_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sagad_outbox', '');
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH ROW
    WHEN (current_setting('sagad.outbox_notify', true) IS DISTINCT FROM 'off')
    EXECUTE FUNCTION sagad_outbox_notify();
