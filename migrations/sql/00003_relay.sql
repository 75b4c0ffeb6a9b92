-- The relay's bookkeeping: which `searchsync run` instances are alive and which
-- instance owns which partition (leases with a fencing epoch), plus two partial
-- indexes on the outbox that keep the relay's claim cheap however long the
-- history of an aggregate is.

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

-- The undelivered events of an aggregate in id order: the relay finds the head
-- of an aggregate (and the events right behind it) without walking its
-- delivered history.
CREATE INDEX ix_outbox_event_undelivered ON aa_outbox_event (aggregate_type, aggregate_id, id)
    WHERE status IN ('pending', 'failed');
-- Failed events block their aggregate until an operator acts; the relay reads
-- them on every claim, so they get their own small index.
CREATE INDEX ix_outbox_event_failed ON aa_outbox_event (aggregate_type, aggregate_id, id)
    WHERE status = 'failed';

-- +goose Down
DROP INDEX ix_outbox_event_failed;
DROP INDEX ix_outbox_event_undelivered;
DROP TABLE aa_relay_lease;
DROP TABLE aa_relay_instance;
