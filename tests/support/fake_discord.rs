//! Fake Discord REST + gateway. Being written.
