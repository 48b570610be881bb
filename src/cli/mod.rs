//! The interactive terminal `bub chat` (stub — being written).
