//! The progressive view's memory, per session: the tools and skills `$hints` asked to see in
//! detail, until the next prompt shows them.
//!
//! Details are never written into the system prompt (which must stay byte-stable for the
//! providers' prompt caches): a hinted tool or skill is *pending* until the session's next
//! prompt is recorded, which then carries a note with its details — at the point it was asked
//! for, and only when the context does not show them already (the model loop checks).
//!
//! Invariant: bounded — at most [`MAX_TOOL_DETAILS`] tools and [`MAX_SKILL_DETAILS`] skills
//! are pending; hinting one more drops the least recently hinted.

/// Tools pending at most.
pub(crate) const MAX_TOOL_DETAILS: usize = 6;
/// Skills pending at most.
pub const MAX_SKILL_DETAILS: usize = 3;

/// Pending tool and skill names, least recently hinted first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expanded {
    tools: Vec<String>,
    skills: Vec<String>,
}

impl Expanded {
    /// Shows `name`'s tool details at the next prompt.
    pub(crate) fn tool(&mut self, name: &str) {
        touch(&mut self.tools, name, MAX_TOOL_DETAILS);
    }

    /// Shows `name`'s skill body at the next prompt.
    pub fn skill(&mut self, name: &str) {
        touch(&mut self.skills, name, MAX_SKILL_DETAILS);
    }

    /// The tools and skills to show now (and no longer pending).
    pub fn take_pending(&mut self) -> (Vec<String>, Vec<String>) {
        (
            std::mem::take(&mut self.tools),
            std::mem::take(&mut self.skills),
        )
    }

    /// Forgets everything (`tape.reset`).
    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }
}

/// Makes `name` the most recent of `list`, dropping the oldest past `cap`.
fn touch(list: &mut Vec<String>, name: &str, cap: usize) {
    list.retain(|n| n != name);
    list.push(name.to_owned());
    if list.len() > cap {
        list.remove(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_names_are_bounded_and_taken_once() {
        let mut e = Expanded::default();
        for name in ["a", "b", "c", "a", "d"] {
            e.skill(name);
        }
        assert_eq!(
            e.take_pending().1,
            ["c", "a", "d"],
            "b dropped out, a moved up"
        );
        assert_eq!(e.take_pending(), (vec![], vec![]));
        for i in 0..10 {
            e.tool(&format!("t{i}"));
        }
        let (tools, _) = e.take_pending();
        assert_eq!(tools.len(), MAX_TOOL_DETAILS);
        assert_eq!(tools.last().map(String::as_str), Some("t9"));
        e.skill("x");
        e.clear();
        assert_eq!(e, Expanded::default());
    }
}
