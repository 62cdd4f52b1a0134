-- sagad core tables (docs/ARCHITECTURE.md, "PostgreSQL model and guarantees").  Applied by `<binary> migrate` inside a
-- transaction, so this file must not contain BEGIN/COMMIT.

CREATE TABLE sagas (
    saga_id          text PRIMARY KEY,
    name             text NOT NULL,
    status           text NOT NULL DEFAULT 'running'
                     CHECK (status IN ('running', 'completed', 'compensating',
                                       'compensated', 'failed')),
    definition       jsonb NOT NULL,
    input            jsonb,
    metadata         jsonb,
    generation       integer NOT NULL DEFAULT 1,   -- bumped by an operator replay
    seq              bigint NOT NULL DEFAULT 0,    -- last event seq emitted
    version          bigint NOT NULL DEFAULT 0,    -- optimistic concurrency
    deadline         timestamptz,
    retry_budget_ms  bigint,
    retry_spent_ms   bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sagas_status ON sagas (status, updated_at);

CREATE TABLE steps (
    saga_id          text NOT NULL REFERENCES sagas ON DELETE CASCADE,
    idx              integer NOT NULL CHECK (idx >= 0),
    name             text NOT NULL,
    tool             text NOT NULL,
    args             jsonb,
    compensate       jsonb,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'succeeded', 'failed',
                                       'compensating', 'compensated',
                                       'compensation_failed', 'skipped')),
    attempts         integer NOT NULL DEFAULT 0,
    idempotency_key  text,
    result           jsonb,
    error_code       text,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, idx),
    UNIQUE (saga_id, name)
);

-- One row per tool call: committed before the call, finished after.  An
-- unfinished row is the trace of a crash (crash-loop detection).
CREATE TABLE attempts (
    id               bigserial PRIMARY KEY,
    saga_id          text NOT NULL,
    step_idx         integer NOT NULL,
    phase            text NOT NULL CHECK (phase IN ('forward', 'compensate')),
    generation       integer NOT NULL,
    attempt          integer NOT NULL CHECK (attempt >= 1),
    idempotency_key  text NOT NULL,
    worker_id        text,
    started_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    status           text CHECK (status IN ('ok', 'error', 'timeout')),
    error_code       text,
    error_class      text,
    latency_ms       bigint,
    envelope         jsonb,
    FOREIGN KEY (saga_id, step_idx) REFERENCES steps ON DELETE CASCADE
);
CREATE INDEX attempts_step ON attempts (saga_id, step_idx, phase, generation, attempt);
CREATE INDEX attempts_unfinished ON attempts (saga_id, step_idx) WHERE finished_at IS NULL;

-- Transactional outbox: the relay publishes rows whose transaction is older
-- than every running one, in (tx, id) order.
CREATE TABLE outbox (
    id               bigserial PRIMARY KEY,
    tx               xid8 NOT NULL DEFAULT pg_current_xact_id(),
    topic            text NOT NULL,
    key              bytea,
    headers          jsonb NOT NULL DEFAULT '{}',
    payload          bytea NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_order ON outbox (tx, id);

-- Delayed messages (retries); the relay moves due ones into the outbox.
CREATE TABLE timers (
    id               bigserial PRIMARY KEY,
    due_at           timestamptz NOT NULL,
    topic            text NOT NULL,
    key              bytea,
    headers          jsonb NOT NULL DEFAULT '{}',
    payload          bytea NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX timers_due ON timers (due_at, id);

-- Consumed offsets live here, written in the outcome's transaction and
-- fenced by owner_epoch, bumped on every assignment.
CREATE TABLE consumer_offsets (
    group_id         text NOT NULL,
    topic            text NOT NULL,
    partition        integer NOT NULL,
    next_offset      bigint NOT NULL CHECK (next_offset >= 0),
    owner_epoch      bigint NOT NULL DEFAULT 0,
    owner            text,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, partition)
);

-- The dead-letter ledger behind the sagad.dlq topic.
CREATE TABLE dead_letters (
    id                   bigserial PRIMARY KEY,
    status               text NOT NULL DEFAULT 'pending'
                         CHECK (status IN ('pending', 'replayed', 'discarded')),
    error_code           text NOT NULL,
    error_class          text NOT NULL,
    message              text,
    saga_id              text,
    saga_name            text,
    step_idx             integer,
    step_name            text,
    tool                 text,
    phase                text CHECK (phase IN ('forward', 'compensate')),
    attempts             integer NOT NULL DEFAULT 0,
    trail                jsonb NOT NULL DEFAULT '[]',
    original_topic       text,
    original_partition   integer,
    original_offset      bigint,
    original_key         bytea,
    original_timestamp   timestamptz,
    original_headers     jsonb,
    payload              bytea,
    first_failure_at     timestamptz,
    last_failure_at      timestamptz,
    worker_id            text,
    sagad_version        text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    resolved_at          timestamptz,
    resolution_reason    text
);
CREATE INDEX dead_letters_code ON dead_letters (error_code, created_at DESC);
CREATE INDEX dead_letters_status ON dead_letters (status, created_at DESC);
CREATE INDEX dead_letters_saga ON dead_letters (saga_id);

-- Who replayed what, when, why, under which new generation.
CREATE TABLE replays (
    id               bigserial PRIMARY KEY,
    dead_letter_id   bigint NOT NULL REFERENCES dead_letters,
    operator         text NOT NULL,
    reason           text NOT NULL,
    new_generation   integer,
    new_key          text,
    payload          bytea,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX replays_dead_letter ON replays (dead_letter_id);
