-- The relay's bookkeeping: which `searchsync run` instances are alive and which
-- instance owns which partition (leases with a fencing epoch), plus two partial
-- indexes on the outbox for the relay's claim: it costs what is pending and
-- what is blocked, never what was delivered.

-- +goose Up
-- One row per running `searchsync run` process. heartbeat_at/expires_at are
-- renewed every lease_ttl/3; a row whose expires_at has passed belongs to a
-- dead (or partitioned) instance and no longer counts for the fair share.
CREATE TABLE aa_relay_instance (
    id           text        PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    partitions   integer     NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

-- One row per partition (0 … relay.partitions-1, created by the first relay).
-- owner is an aa_relay_instance.id or NULL when free; a lease whose expires_at
-- has passed is free too. epoch grows by one on every change of owner: it is
-- the fencing token an ack must still match.
CREATE TABLE aa_relay_lease (
    partition   integer     PRIMARY KEY,
    owner       text,
    epoch       bigint      NOT NULL DEFAULT 0,
    expires_at  timestamptz NOT NULL DEFAULT '-infinity',
    acquired_at timestamptz,
    CONSTRAINT aa_relay_lease_partition_chk CHECK (partition >= 0)
);

-- Pending events in id order: the relay claims in id order, so a batch never
-- leaves a hole in an aggregate's run of events (the spec's pending index is
-- ordered by available_at first).
CREATE INDEX ix_outbox_event_pending_id ON aa_outbox_event (id)
    WHERE status = 'pending';
-- Failed events block their aggregate until an operator acts; the relay reads
-- them on every claim, so they get their own small index.
CREATE INDEX ix_outbox_event_failed ON aa_outbox_event (aggregate_type, aggregate_id, id)
    WHERE status = 'failed';

-- +goose Down
DROP INDEX ix_outbox_event_failed;
DROP INDEX ix_outbox_event_pending_id;
DROP TABLE aa_relay_lease;
DROP TABLE aa_relay_instance;
