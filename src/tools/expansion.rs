//! The progressive view's memory, per session: which tools and skills show their full details
//! in the system prompt.
//!
//! Invariant: bounded — at most [`MAX_TOOL_DETAILS`] tools and [`MAX_SKILL_DETAILS`] skills;
//! expanding one more drops the least recently used, so the prompt never grows without limit.
//! Using a tool or naming a skill again makes it the most recent.

use std::collections::VecDeque;

/// Tool details shown at once.
pub(crate) const MAX_TOOL_DETAILS: usize = 6;
/// Skill bodies shown at once.
pub const MAX_SKILL_DETAILS: usize = 3;

/// Expanded tool and skill names, least recently used first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expanded {
    tools: VecDeque<String>,
    skills: VecDeque<String>,
}

impl Expanded {
    /// Shows `name`'s tool details (most recent).
    pub(crate) fn tool(&mut self, name: &str) {
        touch(&mut self.tools, name, MAX_TOOL_DETAILS);
    }

    /// Shows `name`'s skill body (most recent).
    pub fn skill(&mut self, name: &str) {
        touch(&mut self.skills, name, MAX_SKILL_DETAILS);
    }

    pub(crate) fn has_tool(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t == name)
    }

    #[cfg(test)]
    pub(crate) fn has_skill(&self, name: &str) -> bool {
        self.skills.iter().any(|s| s == name)
    }

    /// Expanded skills, least recently used first.
    pub(crate) fn skills(&self) -> impl Iterator<Item = &str> {
        self.skills.iter().map(String::as_str)
    }

    /// Forgets everything (`tape.reset`).
    pub(crate) fn clear(&mut self) {
        self.tools.clear();
        self.skills.clear();
    }
}

fn touch(list: &mut VecDeque<String>, name: &str, cap: usize) {
    list.retain(|n| n != name);
    list.push_back(name.to_owned());
    while list.len() > cap {
        list.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_details_drop_out() {
        let mut e = Expanded::default();
        for name in ["a", "b", "c"] {
            e.skill(name);
        }
        e.skill("a"); // used again: now the most recent
        e.skill("d");
        assert_eq!(e.skills().collect::<Vec<_>>(), ["c", "a", "d"]);
        assert!(!e.has_skill("b"));
        for i in 0..10 {
            e.tool(&format!("t{i}"));
        }
        assert!(!e.has_tool("t3") && e.has_tool("t4") && e.has_tool("t9"));
        e.clear();
        assert_eq!(e, Expanded::default());
    }
}
