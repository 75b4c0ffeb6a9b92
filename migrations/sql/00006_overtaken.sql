-- Events delivered after a later event of their aggregate (docs/ordering.md):
-- a producer committed them out of id order, having skipped the aggregate's
-- advisory lock. The relay records each one it finds (it delivers them all
-- the same); `status` and the console show them. Rows are removed with the
-- outbox's compaction once older than its retention.

-- +goose Up
CREATE TABLE aa_outbox_overtaken (
    event_id       bigint      PRIMARY KEY,
    aggregate_type text        NOT NULL,
    aggregate_id   uuid        NOT NULL,
    -- the later event of the aggregate that was delivered first
    after_event_id bigint      NOT NULL,
    instance       text        NOT NULL,
    detected_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_outbox_overtaken_detected ON aa_outbox_overtaken (detected_at);

-- The highest event id claimed from the partition by the owner that
-- released it; NULL while a partition is owned, and after an owner died
-- holding it. The next owner checks the events below it for a later event
-- of their aggregate delivered already (with NULL: the events below the
-- outbox's sequence), and claims above it without that look-up.
ALTER TABLE aa_relay_lease ADD COLUMN claimed_max bigint;

-- +goose Down
ALTER TABLE aa_relay_lease DROP COLUMN claimed_max;
DROP TABLE aa_outbox_overtaken;
