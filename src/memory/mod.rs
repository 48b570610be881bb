//! Memory that lasts: facts and preferences Bub keeps across `/new`, `tape.reset`, compaction
//! and restarts, in Markdown files a person can read and edit.
//!
//! * `BUB_HOME/memory/global.md` — the owners' memory, shown in every session;
//! * `BUB_HOME/memory/chats/<session>.md` — one chat's memory (`telegram%3A42.md`), shown in
//!   that chat's sessions only;
//! * `BUB_HOME/memory/checkpoints/<session>.md` — a session's working checkpoint (current goal,
//!   key facts, next step; at most [`MAX_CHECKPOINT_BYTES`]), replaced as a whole, shown every
//!   step so a long task survives compactions.
//!
//! A file is a bullet list, one entry per line (`- prefers metric units`); other lines are kept
//! out of the prompt. Each file is capped ([`MAX_ENTRIES`] entries, [`MAX_BYTES`] bytes, an
//! entry [`MAX_ENTRY_CHARS`] characters): remembering an entry again moves it to the end (the
//! most recently used), and the oldest entries make room. Entries are deduplicated ignoring case
//! and spacing. Writes are atomic (temp file + rename) under a lock, so a person editing the
//! file and the agent never see half a file. All of it is file I/O: async code calls it on the
//! blocking pool.

use std::path::{Path, PathBuf};

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

/// The most entries one memory file keeps.
pub const MAX_ENTRIES: usize = 50;
/// The most bytes one memory file's entries take.
pub const MAX_BYTES: usize = 4 * 1024;
/// The longest entry, in characters (longer ones are cut).
pub const MAX_ENTRY_CHARS: usize = 300;
/// The largest working checkpoint of a session, in bytes (a longer one is cut).
pub const MAX_CHECKPOINT_BYTES: usize = 1024;

/// Which memory an operation works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every session's (owners only write it).
    Global,
    /// One chat's: the session id (`telegram:42`, `cli`).
    Chat(String),
}

/// The memory files under one `BUB_HOME`.
#[derive(Debug, Clone)]
pub struct Memory {
    dir: PathBuf,
}

impl Memory {
    /// The memory of `home` (`BUB_HOME`).
    pub fn new(home: &Path) -> Self {
        Self {
            dir: home.join("memory"),
        }
    }

    /// The working checkpoint of `session`, if it has one.
    pub fn checkpoint(&self, session: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.checkpoint_path(session)).ok()?;
        Some(text.trim().to_owned()).filter(|t| !t.is_empty())
    }

    /// Replaces the working checkpoint of `session` (cut to [`MAX_CHECKPOINT_BYTES`] at a
    /// character boundary); empty text removes it. Returns what was stored.
    pub fn set_checkpoint(&self, session: &str, text: &str) -> anyhow::Result<String> {
        let path = self.checkpoint_path(session);
        let mut text = text.trim().to_owned();
        if text.is_empty() {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => return Ok(text),
            }
        }
        let mut end = text.len().min(MAX_CHECKPOINT_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        crate::storage::write_atomic(&path, text.as_bytes(), Some(0o600))?;
        Ok(text)
    }

    fn checkpoint_path(&self, session: &str) -> PathBuf {
        let name = utf8_percent_encode(session, NON_ALPHANUMERIC);
        self.dir.join("checkpoints").join(format!("{name}.md"))
    }

    /// The file of `scope`.
    pub fn path(&self, scope: &Scope) -> PathBuf {
        match scope {
            Scope::Global => self.dir.join("global.md"),
            Scope::Chat(session) => {
                let name = utf8_percent_encode(session, NON_ALPHANUMERIC);
                self.dir.join("chats").join(format!("{name}.md"))
            }
        }
    }

    /// The entries of `scope`, oldest first (none when the file does not exist).
    pub fn list(&self, scope: &Scope) -> Vec<String> {
        std::fs::read_to_string(self.path(scope))
            .map(|text| entries(&text))
            .unwrap_or_default()
    }

    /// Remembers `text` in `scope` (as the newest entry; an equal one moves there), dropping
    /// the oldest entries beyond the caps. Returns the entry as stored.
    pub fn remember(&self, scope: &Scope, text: &str) -> anyhow::Result<String> {
        let entry = clean(text);
        anyhow::ensure!(!entry.is_empty(), "nothing to remember");
        self.change(scope, |list| {
            list.retain(|e| key(e) != key(&entry));
            list.push(entry.clone());
            while list.len() > MAX_ENTRIES
                || list.iter().map(|e| e.len() + 3).sum::<usize>() > MAX_BYTES
            {
                list.remove(0);
            }
        })?;
        Ok(entry)
    }

    /// Forgets the entries of `scope` that contain `text` (ignoring case); returns them.
    pub fn forget(&self, scope: &Scope, text: &str) -> anyhow::Result<Vec<String>> {
        let needle = key(text);
        anyhow::ensure!(!needle.is_empty(), "say what to forget");
        let mut gone = Vec::new();
        self.change(scope, |list| {
            list.retain(|e| {
                let hit = key(e).contains(&needle);
                if hit {
                    gone.push(e.clone());
                }
                !hit
            });
        })?;
        Ok(gone)
    }

    /// Rewrites `scope`'s file with `change` applied to its entries, under the memory lock.
    fn change(&self, scope: &Scope, change: impl FnOnce(&mut Vec<String>)) -> anyhow::Result<()> {
        let _lock = crate::storage::lock(&self.dir.join("memory.lock"))?;
        let mut list = self.list(scope);
        change(&mut list);
        // One `- entry` line each (`write_atomic` ends the file with a newline).
        let text: Vec<String> = list.iter().map(|e| format!("- {e}")).collect();
        crate::storage::write_atomic(&self.path(scope), text.join("\n").as_bytes(), Some(0o600))
    }

    /// The `<memory>` block of a session's system prompt (empty when nothing is remembered):
    /// the global entries (`with_global`: an owner's turn), then the chat's. Bounded by the
    /// caps of the two files.
    pub fn prompt_block(&self, session: &str, with_global: bool) -> String {
        let global = if with_global {
            self.list(&Scope::Global)
        } else {
            Vec::new()
        };
        let chat = self.list(&Scope::Chat(session.to_owned()));
        let checkpoint = self.checkpoint(session);
        if global.is_empty() && chat.is_empty() && checkpoint.is_none() {
            return String::new();
        }
        let mut out = String::from(
            "<memory>\nWhat you remember (kept across sessions; `memory.remember` and \
             `memory.forget` change it):\n",
        );
        for (title, list) in [("global", &global), ("this chat", &chat)] {
            if !list.is_empty() {
                out.push_str(&format!("{title}:\n"));
                for entry in list.iter() {
                    out.push_str(&format!("- {entry}\n"));
                }
            }
        }
        if let Some(checkpoint) = checkpoint {
            out.push_str("working checkpoint of this session (`memory.checkpoint` replaces it):\n");
            out.push_str(&checkpoint);
            out.push('\n');
        }
        out.push_str("</memory>");
        out
    }
}

/// The entries of a memory file: its bullet lines, cleaned.
fn entries(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- "))
        .map(clean)
        .filter(|e| !e.is_empty())
        .take(MAX_ENTRIES * 2)
        .collect()
}

/// One line, spacing collapsed, at most [`MAX_ENTRY_CHARS`] characters.
fn clean(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    one_line.chars().take(MAX_ENTRY_CHARS).collect()
}

/// What makes two entries the same: their text ignoring case and spacing.
fn key(text: &str) -> String {
    clean(text).to_lowercase()
}

/// The lesson of a tool call that failed with `error` and then worked with `arguments` (both
/// shortened), as a memory entry.
pub fn lesson(tool: &str, error: &str, arguments: &str) -> String {
    let short = |text: &str, chars: usize| -> String {
        let text = clean(text);
        match text.char_indices().nth(chars) {
            Some((at, _)) => format!("{}…", &text[..at]),
            None => text,
        }
    };
    // `error: tool 'fs.read' failed: file not found: …` → the reason alone.
    let error = error.strip_prefix("error: ").unwrap_or(error);
    let error = match error.strip_prefix("tool '") {
        Some(rest) => rest.split_once(" failed: ").map_or(error, |(_, why)| why),
        None => error,
    };
    format!(
        "lesson: `{tool}` failed ({}); what worked: {}",
        short(error, 120),
        short(arguments, 150)
    )
}

/// The text after a `remember:` (or `记住：`) prefix of a message, if it has one: Bub keeps it
/// in the chat's memory itself, without asking the model.
pub fn remember_prefix(message: &str) -> Option<&str> {
    let text = message.trim_start();
    for prefix in ["记住：", "记住:"] {
        if let Some(rest) = text.strip_prefix(prefix) {
            return Some(rest.trim()).filter(|r| !r.is_empty());
        }
    }
    let head = text.get(..9)?;
    head.eq_ignore_ascii_case("remember:")
        .then(|| text[9..].trim())
        .filter(|r| !r.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembering_deduplicates_moves_to_the_end_and_keeps_within_the_caps() {
        let dir = tempfile::tempdir().unwrap();
        let memory = Memory::new(dir.path());
        let chat = Scope::Chat("telegram:42".into());
        memory.remember(&chat, "prefers  metric units").unwrap();
        memory.remember(&chat, "lives in Lyon").unwrap();
        memory.remember(&chat, "Prefers metric UNITS").unwrap();
        assert_eq!(
            memory.list(&chat),
            ["lives in Lyon", "Prefers metric UNITS"]
        );
        assert!(memory.path(&chat).ends_with("chats/telegram%3A42.md"));
        for i in 0..200 {
            memory.remember(&chat, &format!("fact number {i}")).unwrap();
        }
        let list = memory.list(&chat);
        assert!(list.len() <= MAX_ENTRIES);
        let bytes = std::fs::read_to_string(memory.path(&chat)).unwrap().len();
        assert!(bytes <= MAX_BYTES, "{bytes}");
        assert_eq!(list.last().unwrap(), "fact number 199", "the newest stays");
        assert!(
            !list.contains(&"lives in Lyon".to_owned()),
            "the oldest went first"
        );
        let long = memory.remember(&Scope::Global, &"x".repeat(1000)).unwrap();
        assert_eq!(long.chars().count(), MAX_ENTRY_CHARS);
    }

    #[test]
    fn forgetting_removes_matching_entries_and_the_block_shows_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let memory = Memory::new(dir.path());
        assert_eq!(memory.prompt_block("cli", true), "");
        memory.remember(&Scope::Global, "owner is Ana").unwrap();
        memory
            .remember(&Scope::Chat("cli".into()), "likes tea")
            .unwrap();
        memory
            .remember(&Scope::Chat("cli".into()), "likes green tea")
            .unwrap();
        let block = memory.prompt_block("cli", true);
        assert!(
            block.starts_with("<memory>") && block.ends_with("</memory>"),
            "{block}"
        );
        assert!(block.contains("- owner is Ana") && block.contains("- likes green tea"));
        assert!(
            !memory.prompt_block("telegram:1", true).contains("tea"),
            "other chats' memory"
        );
        assert!(
            !memory.prompt_block("cli", false).contains("Ana"),
            "a guest's turn"
        );
        let gone = memory.forget(&Scope::Chat("cli".into()), "TEA").unwrap();
        assert_eq!(gone.len(), 2);
        assert!(memory.list(&Scope::Chat("cli".into())).is_empty());
    }

    #[test]
    fn a_checkpoint_is_replaced_whole_cut_to_its_cap_and_shown_in_the_block() {
        let dir = tempfile::tempdir().unwrap();
        let memory = Memory::new(dir.path());
        assert_eq!(memory.checkpoint("cli"), None);
        memory
            .set_checkpoint("cli", "goal: migrate\nnext: step 2")
            .unwrap();
        let block = memory.prompt_block("cli", false);
        assert!(
            block.contains("working checkpoint") && block.contains("next: step 2"),
            "{block}"
        );
        let long = memory.set_checkpoint("cli", &"é".repeat(1000)).unwrap();
        assert!(long.len() <= MAX_CHECKPOINT_BYTES && long.len() > MAX_CHECKPOINT_BYTES - 2);
        assert_eq!(
            memory.checkpoint("cli").unwrap(),
            long,
            "replaced, not appended"
        );
        memory.set_checkpoint("cli", "  ").unwrap();
        assert_eq!(memory.checkpoint("cli"), None);
        assert_eq!(memory.prompt_block("cli", false), "");
    }

    #[test]
    fn a_hand_edited_file_keeps_only_its_bullets() {
        let dir = tempfile::tempdir().unwrap();
        let memory = Memory::new(dir.path());
        let path = memory.path(&Scope::Global);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "# My notes\n\n- one\nsome prose\n  - two\n-\n").unwrap();
        assert_eq!(memory.list(&Scope::Global), ["one", "two"]);
    }

    #[test]
    fn the_remember_prefix_is_recognised_in_english_and_chinese() {
        assert_eq!(remember_prefix("remember: I like tea"), Some("I like tea"));
        assert_eq!(
            remember_prefix("  Remember:  short answers "),
            Some("short answers")
        );
        assert_eq!(remember_prefix("记住：我喜欢茶"), Some("我喜欢茶"));
        assert_eq!(remember_prefix("remember:"), None);
        assert_eq!(remember_prefix("do you remember: this?"), None);
        assert_eq!(remember_prefix("rem"), None);
    }
}
