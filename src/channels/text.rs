//! Outbound text shaping: splitting for platform limits and Markdown rendering. Being written.
