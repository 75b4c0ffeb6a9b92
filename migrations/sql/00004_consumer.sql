-- Independent consumers (docs/consumers.md). The outbox row keeps the spec's
-- meaning (dispatched when every routed consumer has the event); what each
-- consumer has done with an event lives here, and only for events whose
-- consumers went different ways: while every routed consumer is in the same
-- state (none has it yet, all retry together, all delivered) the outbox row
-- alone says it and nothing is written here.

-- +goose Up
-- One row per (event, routed consumer) once the consumers of an event
-- diverged: state done (this consumer has it), pending (it still has to
-- deliver it: attempts, last_error and available_at are its own) or failed
-- (parked for this consumer until an operator retries or acknowledges it).
-- The aggregate is copied from the event so that a claim finds the
-- per-consumer blockers of an aggregate through one small partial index.
-- The rows go when the event is dispatched or acknowledged.
CREATE TABLE aa_outbox_delivery (
    -- No foreign key: a cascade would cost compaction a look-up per deleted
    -- event. searchsync deletes the rows with their event (dispatch,
    -- acknowledgement); compaction deletes dispatched events, which have none.
    event_id       bigint      NOT NULL,
    consumer       text        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   uuid,
    state          text        NOT NULL,
    attempts       integer     NOT NULL DEFAULT 0,
    last_error     text,
    available_at   timestamptz NOT NULL DEFAULT now(),
    delivered_at   timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, consumer),
    CONSTRAINT aa_outbox_delivery_state_chk CHECK (state IN ('done', 'pending', 'failed')),
    CONSTRAINT aa_outbox_delivery_attempts_chk CHECK (attempts >= 0)
);

-- What a consumer still owes, per aggregate in id order: the claim's
-- per-consumer blockers, and `outbox list --consumer`.
CREATE INDEX ix_outbox_delivery_open ON aa_outbox_delivery (aggregate_type, aggregate_id, consumer, event_id)
    WHERE state <> 'done';
CREATE INDEX ix_outbox_delivery_consumer ON aa_outbox_delivery (consumer, state, event_id)
    WHERE state <> 'done';
-- Rows held back for a paused consumer (available_at far in the future,
-- outbox.HeldSQL), which the relay releases in id order when it resumes.
CREATE INDEX ix_outbox_delivery_held ON aa_outbox_delivery (consumer, event_id)
    WHERE state = 'pending' AND available_at = '9999-12-31 00:00:00+00'::timestamptz;

-- The claim walks pending events in id order. Events held back for a paused
-- consumer (available_at = '9999-12-31', outbox.HeldSQL) must not be walked
-- on every claim while the outage lasts, so this index replaces 00003's
-- ix_outbox_event_pending_id (same columns, one entry per pending event as
-- before; producers pay nothing extra).
CREATE INDEX ix_outbox_event_claimable ON aa_outbox_event (id)
    WHERE status = 'pending' AND available_at < '9999-12-31 00:00:00+00'::timestamptz;
DROP INDEX ix_outbox_event_pending_id;

-- One row per consumer that was ever paused: state running or paused. A
-- consumer is paused when it cannot deliver at all (its engine, endpoint or
-- server is unreachable or refuses every request); every relay then stops
-- sending it events and probes it at probe_at, with capped backoff (probes
-- counts the failed probes). The first relay whose probe succeeds sets it
-- running again and every relay resumes within a second.
CREATE TABLE aa_outbox_consumer (
    consumer   text        PRIMARY KEY,
    state      text        NOT NULL DEFAULT 'running',
    paused_at  timestamptz,
    reason     text,
    probes     integer     NOT NULL DEFAULT 0,
    probe_at   timestamptz,
    instance   text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT aa_outbox_consumer_state_chk CHECK (state IN ('running', 'paused'))
);

-- +goose Down
CREATE INDEX ix_outbox_event_pending_id ON aa_outbox_event (id) WHERE status = 'pending';
DROP INDEX ix_outbox_event_claimable;
DROP TABLE aa_outbox_consumer;
DROP TABLE aa_outbox_delivery;
