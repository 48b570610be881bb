-- The usage ledger replicas share: a row per model call (or, imported from a one-box ledger,
-- per day, session, purpose and model), summed for the daily budgets and `bub usage`.
CREATE TABLE bub_usage (
    id bigserial PRIMARY KEY,
    day date NOT NULL,
    session text NOT NULL,
    purpose text NOT NULL,
    model text NOT NULL,
    input bigint NOT NULL,
    cache_read bigint NOT NULL,
    cache_write bigint NOT NULL,
    output bigint NOT NULL,
    estimated bigint NOT NULL,
    calls bigint NOT NULL,
    -- Set on rows `bub db import` added: importing the same ledger again adds nothing.
    import_key text UNIQUE
);
CREATE INDEX bub_usage_day ON bub_usage (day, session);
