-- Results flow forward, unknown outcomes, the whole envelope (issue 24;
-- DESIGN section 10, docs/WORKER.md "References" and "Unknown outcomes").

-- A step whose last attempt may have taken effect (a timeout, a transport
-- error after the request went out, a crash loop) ends `unknown`, not
-- `failed`: when its saga compensates, a reversible unknown step is
-- compensated first, under its forward key.
ALTER TABLE steps DROP CONSTRAINT steps_status_check;
ALTER TABLE steps ADD CONSTRAINT steps_status_check
    CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'unknown',
                      'compensating', 'compensated', 'compensation_failed', 'skipped'));

-- The envelope's statuses: partial (a parallel group, some members
-- failed) and cancelled (the saga was cancelled while the call ran) are
-- defined now and produced by later work.
ALTER TABLE attempts DROP CONSTRAINT attempts_status_check;
ALTER TABLE attempts ADD CONSTRAINT attempts_status_check
    CHECK (status IN ('ok', 'partial', 'error', 'timeout', 'cancelled'));

-- What the call really sent: the step's args with every {"$from": ...}
-- reference resolved (NULL for attempts written before this migration).
ALTER TABLE attempts ADD COLUMN args jsonb;

-- The saga's declared output, resolved when it completes.
ALTER TABLE sagas ADD COLUMN output jsonb;

-- The generation whose idempotency key a step's forward calls use, when a
-- replay kept an older one so that a call whose effect may stand is made
-- again under the same key (docs/DLQ.md, "What a replay does").  NULL:
-- the saga's current generation.  steps.idempotency_key is the forward
-- key of the step's last forward attempt (a compensation's key is on its
-- attempt rows only), which a compensation receives under `forward`.
ALTER TABLE steps ADD COLUMN key_generation integer;

-- Whether a step's forward effect is `known` (it answered ok) or only
-- `possible` (it ended unknown); a compensation receives it under
-- `forward.effect`.  NULL until the step's forward call ends one of those
-- ways.
ALTER TABLE steps ADD COLUMN forward_effect text
    CHECK (forward_effect IN ('known', 'possible'));

-- A saga whose steps reference results, or that declares an output: the
-- worker loads its steps' results with it (others load none: a step's
-- result can be large, and most sagas never read one back).  A "$from"
-- anywhere in the definition's text, even inside an input string, only
-- costs that load.
ALTER TABLE sagas ADD COLUMN results_flow boolean
    GENERATED ALWAYS AS (definition ? 'output' OR strpos(definition::text, '"$from"') > 0) STORED;

-- agent_action (schemas/error_codes.json; docs/ARCHITECTURE.md, "The
-- envelope"): the recovery instruction of a failure, the tool's own kept
-- verbatim when its error answer carried one, else the default of its
-- error code.  On the step that failed (for the terminal events) and on
-- the dead letter (for its record on the DLQ topic).
ALTER TABLE steps ADD COLUMN agent_action text;
ALTER TABLE dead_letters ADD COLUMN agent_action text;

-- The DLQ record of 0005, plus agent_action.
ALTER FUNCTION sagad_dead_letter_record(dead_letters) RENAME TO sagad_dead_letter_record_0005;
CREATE FUNCTION sagad_dead_letter_record(d dead_letters) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT sagad_dead_letter_record_0005(d) || jsonb_build_object('agent_action', d.agent_action)
$$;
