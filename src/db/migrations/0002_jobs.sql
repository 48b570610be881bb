-- Scheduled jobs: one row per job, in the order the scheduler keeps them.
CREATE TABLE bub_jobs (
    id text PRIMARY KEY,
    position bigint NOT NULL,
    -- The job as JSON, exactly what `jobs.json` holds for it.
    job text NOT NULL
);

-- Counts the stored changes: a reader tells cheaply whether anyone changed the jobs, and
-- every change takes this row's lock, so changes from any replica never interleave.
CREATE TABLE bub_jobs_state (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint NOT NULL
);
INSERT INTO bub_jobs_state (version) VALUES (0);

-- Jobs set aside because they cannot run.
CREATE TABLE bub_jobs_rejected (
    seq bigserial PRIMARY KEY,
    job text NOT NULL,
    reason text NOT NULL,
    rejected_at timestamptz NOT NULL DEFAULT now()
);
