-- The operator console's history (docs/console.md): samples of the lag
-- figures that survive a restart and are the same on every relay, because
-- every relay's page reads them from here. One relay at a time writes them:
-- the one holding the console lease.

-- +goose Up
-- One row per sample time: the figures of the whole outbox (lag, blocked,
-- throughput) per consumer and index, and the commit → delivered percentiles
-- of the relay that wrote it, as one compact JSON document (docs/console.md,
-- "History"). Rows older than http.history_retention are deleted in bounded
-- batches by the writer.
CREATE TABLE aa_console_sample (
    at       timestamptz PRIMARY KEY,
    instance text        NOT NULL,
    sample   jsonb       NOT NULL
);

-- The single row that says which relay writes the samples. A relay takes it
-- when it is free or expired (5 history intervals without a renewal, at
-- least 30 s) and renews it with every sample it writes, in the same
-- statement.
CREATE TABLE aa_console_lease (
    id         smallint    PRIMARY KEY DEFAULT 1,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT aa_console_lease_one_chk CHECK (id = 1)
);

-- +goose Down
DROP TABLE aa_console_lease;
DROP TABLE aa_console_sample;
