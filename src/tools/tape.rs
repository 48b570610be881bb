//! Built-in tools (stub — being written).

use super::Tool;

/// The tools of this file.
pub fn tools() -> Vec<Tool> {
    Vec::new()
}
