-- The name of an `event` entry as a column of its own (`run`, `messages.left_out`, …), so a
-- query finds events by name, not by the text of their payload. Entries written before get
-- theirs from the payload, which Bub writes starting `{"name":"<name>"`; an event written
-- otherwise has none and is passed over, as before.
ALTER TABLE bub_tape_entries ADD COLUMN event text;

UPDATE bub_tape_entries
SET event = substring(payload FROM '^\{"name":"([^"\\]*)"')
WHERE kind = 'event';

CREATE INDEX bub_tape_events ON bub_tape_entries (tape, event, id) WHERE kind = 'event';
