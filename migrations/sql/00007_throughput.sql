-- Events delivered per second and consumer, written by the relays' acks in
-- the same statement that records the outcomes (docs/lag.md, "Throughput"):
-- one row per second, consumer and database connection, so acks never wait
-- on each other's rows; consumer '*' counts the events dispatched or
-- skipped. The lag reader sums the rows of whole seconds; the console's
-- history writer deletes rows older than ten minutes.

-- +goose Up
CREATE TABLE aa_consumer_throughput (
    second   timestamptz NOT NULL,
    consumer text        NOT NULL,
    backend  integer     NOT NULL,
    events   bigint      NOT NULL,
    PRIMARY KEY (second, consumer, backend)
);

-- +goose Down
DROP TABLE aa_consumer_throughput;
