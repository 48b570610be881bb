//! Discord adapter (serenity gateway + REST). Being written.
