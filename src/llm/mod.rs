//! OpenAI-compatible model client (stub — being written).
