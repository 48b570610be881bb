//! One agent turn: router, model loop, prompt (stub — being written).
