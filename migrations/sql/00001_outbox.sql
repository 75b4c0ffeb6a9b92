-- The outbox table exactly as the spec (AA_OUTBOX_EVENT) gives it, plus the
-- minimal AA_AUDIT_LOG a standalone install needs for the audit_log_id foreign key.
-- Every statement is unqualified: the migrator runs with search_path set to the
-- configured schema (default mdm).

-- +goose Up
-- The platform owns AA_AUDIT_LOG. Where it already exists in this schema it is
-- used as it is; a standalone install gets this minimal table.
CREATE TABLE IF NOT EXISTS aa_audit_log (
    id         bigserial   PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text        NOT NULL DEFAULT current_user,
    action     text,
    details    jsonb
);

CREATE TYPE outbox_status AS ENUM ('pending', 'dispatched', 'failed', 'skipped');

CREATE TABLE aa_outbox_event (
    id             bigserial     PRIMARY KEY,
    tenant_id      uuid,
    event_type     text          NOT NULL,
    schema_version integer       NOT NULL DEFAULT 1,
    aggregate_type text          NOT NULL,
    aggregate_id   uuid,
    audit_log_id   bigint        CONSTRAINT outbox_event_audit_log_fk REFERENCES aa_audit_log (id),
    correlation_id uuid,
    payload        jsonb         NOT NULL,
    status         outbox_status NOT NULL DEFAULT 'pending',
    attempts       integer       NOT NULL DEFAULT 0,
    last_error     text,
    available_at   timestamptz   NOT NULL DEFAULT now(),
    dispatched_at  timestamptz,
    created_at     timestamptz   NOT NULL DEFAULT now(),
    created_by     text          NOT NULL DEFAULT current_user,
    CONSTRAINT outbox_event_payload_is_object_chk CHECK (jsonb_typeof(payload) = 'object'),
    CONSTRAINT outbox_event_attempts_chk CHECK (attempts >= 0)
);

CREATE INDEX ix_outbox_event_pending ON aa_outbox_event (status, available_at, id) WHERE status = 'pending';
CREATE INDEX ix_outbox_event_aggregate ON aa_outbox_event (aggregate_type, aggregate_id, id);
CREATE INDEX ix_outbox_event_correlation ON aa_outbox_event (correlation_id) WHERE correlation_id IS NOT NULL;

-- +goose Down
DROP TABLE aa_outbox_event;
DROP TYPE outbox_status;
