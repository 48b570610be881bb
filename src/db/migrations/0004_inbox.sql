-- The inbox and delivery ledger replicas share: a row per received message or scheduled run,
-- the records of its progress (started, answered, each part sent, what its turn sent), the
-- platforms' cursors and each chat's newest message id.
CREATE TABLE bub_inbox (
    seq bigserial PRIMARY KEY,
    -- The session whose actor runs it: the chat lease's key.
    session text NOT NULL,
    -- A received message's channel, chat and platform id (NULL for a run): a message the
    -- platform delivers twice is stored once.
    key text UNIQUE,
    -- The journal record that received it (`recv` or `job`), as JSON.
    record text NOT NULL,
    -- Handed to the actor of the replica holding the session's lease.
    taken boolean NOT NULL DEFAULT false,
    received_at timestamptz NOT NULL DEFAULT now(),
    -- Needs no more work; the row stays a day to recognise a late copy.
    done_at timestamptz
);
CREATE INDEX bub_inbox_pending ON bub_inbox (session, seq) WHERE done_at IS NULL;
CREATE INDEX bub_inbox_done ON bub_inbox (done_at) WHERE done_at IS NOT NULL;

CREATE TABLE bub_inbox_progress (
    id bigserial PRIMARY KEY,
    session text NOT NULL,
    seqs bigint[] NOT NULL,
    record text NOT NULL
);
CREATE INDEX bub_inbox_progress_session ON bub_inbox_progress (session, id);

CREATE TABLE bub_inbox_cursors (
    channel text PRIMARY KEY,
    at bigint NOT NULL
);

CREATE TABLE bub_inbox_seen (
    channel text NOT NULL,
    chat text NOT NULL,
    id bigint NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, chat)
);

-- How many chat leases each replica holds (`bub status`).
ALTER TABLE bub_replicas ADD COLUMN leases integer NOT NULL DEFAULT 0;
