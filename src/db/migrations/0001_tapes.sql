-- Tapes: one row per (workspace, tape name), one row per entry.
CREATE TABLE bub_tapes (
    id bigserial PRIMARY KEY,
    -- md5 of the canonical workspace path (as in a tape file's name).
    workspace text NOT NULL,
    -- `bub:<md5(session)[..16]>`, or an archived tape's name.
    name text NOT NULL,
    -- Bumped by every reset: a reader's position on the tape is void after one.
    generation bigint NOT NULL DEFAULT 0,
    -- The largest id given out; an append takes the next one under this row's lock.
    last_id bigint NOT NULL DEFAULT 0,
    UNIQUE (workspace, name)
);

CREATE TABLE bub_tape_entries (
    tape bigint NOT NULL REFERENCES bub_tapes (id) ON DELETE CASCADE,
    id bigint NOT NULL,
    kind text NOT NULL,
    date text NOT NULL,
    -- The JSON text as written, so an entry reads back byte for byte (prompt caching depends
    -- on it; `jsonb` would reorder keys).
    payload text NOT NULL,
    meta text NOT NULL,
    PRIMARY KEY (tape, id)
);

-- The context starts after the last anchor.
CREATE INDEX bub_tape_anchors ON bub_tape_entries (tape, id) WHERE kind = 'anchor';
