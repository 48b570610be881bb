-- The processes serving from this database: each keeps its row fresh while it runs.
CREATE TABLE bub_replicas (
    id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    -- `message` (the channel daemon) or `idle` (the scheduler alone).
    role text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
