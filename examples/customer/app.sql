-- A platform's own customer table, as the customer example's backfill source
-- reads it (searchsync.yaml, backfill.sources: customers). It stands for the
-- data a platform already has before it adopts searchsync: try the onboarding
-- path of the README with it. 10,000 customers in three tenants, written once.
CREATE SCHEMA IF NOT EXISTS app;

CREATE TABLE IF NOT EXISTS app.customer (
    id           uuid        PRIMARY KEY,
    tenant_key   text        NOT NULL,
    code         text        NOT NULL,
    display_name text        NOT NULL,
    status       text        NOT NULL,
    city         text,
    version      bigint      NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

INSERT INTO app.customer (id, tenant_key, code, display_name, status, city, version)
SELECT gen_random_uuid(),
       (ARRAY['acme', 'globex', 'initech'])[1 + g % 3],
       'C-' || (100000 + g),
       'Customer ' || g,
       (ARRAY['active', 'draft', 'blocked'])[1 + g % 3],
       (ARRAY['Berlin', 'Hamburg', 'Munich', 'Cologne'])[1 + g % 4],
       1 + g % 5
FROM generate_series(1, 10000) AS g
WHERE NOT EXISTS (SELECT 1 FROM app.customer);
