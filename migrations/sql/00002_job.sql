-- AA_JOB: one row per run of a background job (outbox_compact, reindex). A job
-- records what it did in result, where it stands in progress (so that a crashed
-- run can resume) and who runs it in owner + heartbeat_at.

-- +goose Up
CREATE TABLE aa_job (
    id           bigserial   PRIMARY KEY,
    job_kind     text        NOT NULL,
    job_key      text,
    state        text        NOT NULL DEFAULT 'running',
    owner        text,
    params       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    progress     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    result       jsonb,
    error        text,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    CONSTRAINT aa_job_state_chk CHECK (state IN ('running', 'succeeded', 'failed', 'aborted'))
);

CREATE INDEX ix_aa_job_kind ON aa_job (job_kind, started_at DESC);
-- At most one running job per kind and key (a reindex of one alias, one compaction).
CREATE UNIQUE INDEX ux_aa_job_running ON aa_job (job_kind, coalesce(job_key, '')) WHERE state = 'running';

-- +goose Down
DROP TABLE aa_job;
