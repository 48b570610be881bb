-- Small documents replicas share, by the name of the file one box keeps under BUB_HOME
-- (`access.json`, `memory/global.md`, ...): read whole, replaced whole.
CREATE SEQUENCE bub_documents_version;
CREATE TABLE bub_documents (
    name text PRIMARY KEY,
    body text NOT NULL,
    -- Changes with every write, never reused: a reader's cache compares it.
    version bigint NOT NULL DEFAULT nextval('bub_documents_version'),
    updated_at timestamptz NOT NULL DEFAULT now()
);
