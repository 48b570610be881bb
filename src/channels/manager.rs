//! Channel manager. Being written.
