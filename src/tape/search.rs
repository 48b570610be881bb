//! `tape.search`: substring or fuzzy matching over `message` and `tool_result` entries (and
//! the `messages.left_out` events holding the overflow of very large batches),
//! newest first.
//!
//! The query is trimmed and lower-cased (empty → no results). An entry matches when
//! the query is a substring of the lower-cased JSON of its payload or of its meta, or — for
//! queries of at least 3 characters — fuzzily: the query's tokens (`[a-z0-9_/-]+`) joined by
//! one space are compared with candidates taken from the entry's tokens (payload then meta):
//! the first 128 tokens one by one, plus up to 128 sliding windows of as many tokens as the
//! query has. A candidate matches when `rapidfuzz::fuzz::ratio` (normalized Indel similarity)
//! is at least 0.8: the ratio over windows finds a short query inside a long text, which the
//! plain ratio over the whole text would not.
//!
//! Performance: entries are scanned newest first straight from the file in 1 MiB chunks (the
//! index keeps no record per entry: lines are found by a backward scan for `\n`, and each
//! line's kind is read from its header prefix), without parsing JSON (payload and meta are
//! located by a bracket scan of the line); only matches are parsed. Candidates that cannot reach a 0.8 ratio by their length or by the
//! query characters they lack are skipped before the ratio is computed (the ratio is
//! `2·LCS/(a+b)`, so it needs `LCS ≥ 0.4·(a+b)`).

use rapidfuzz::fuzz::{Args, RatioBatchComparator};

use super::entry::{Kind, TapeEntry, parse_entry, payload_meta_spans};
use super::index::{BackLines, line_kind};
use super::store::FileTape;

/// Fuzzy threshold (a ratio of 80 %, on rapidfuzz-rs's 0..1 scale).
const THRESHOLD: f64 = 0.8;
/// How many single tokens and how many windows are tried per entry.
const MAX_CANDIDATES: usize = 128;

/// What a search looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Searched {
    /// Messages, tool results and the messages a batch left out.
    Everything,
    /// What was said in the chat: messages and left-out messages, never tool results (a guest
    /// in a shared chat does not read the output of the owner's commands).
    Conversation,
}

impl FileTape {
    /// Entries matching `query`, newest first, at most `limit` (see the module documentation).
    pub fn search(
        &mut self,
        query: &str,
        limit: usize,
        what: Searched,
    ) -> anyhow::Result<Vec<TapeEntry>> {
        let Some(matcher) = Matcher::new(query) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.read(|index, file| {
            let Some(file) = file else {
                return Ok(Vec::new());
            };
            let mut back = BackLines::new(file, index.synced);
            let mut scratch = Scratch::default();
            let mut out = Vec::new();
            while let Some(line) = back.next_line()? {
                if line_kind(line).is_some_and(|kind| searched(&kind, what, line))
                    && matcher.matches_line(line, &mut scratch)
                    && let Some(entry) = parse_entry(line)
                {
                    out.push(entry);
                    if out.len() >= limit {
                        break;
                    }
                }
            }
            Ok(out)
        })
    }
}

/// Whether an entry of `kind`, whose line (or payload) is `text`, is looked at by a search of
/// `what`.
fn searched(kind: &Kind, what: Searched, text: &[u8]) -> bool {
    match kind {
        Kind::Message => true,
        Kind::ToolResult => what == Searched::Everything,
        Kind::Event => is_left_out(text),
        _ => false,
    }
}

/// A search over a store that keeps each entry's payload and meta as JSON texts (a database):
/// the store reads entries newest first and keeps those [`Search::matches`] accepts.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) struct Search {
    matcher: Matcher,
    scratch: Scratch,
    what: Searched,
}

#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
impl Search {
    /// `None` when `query` matches nothing (blank).
    pub(crate) fn new(query: &str, what: Searched) -> Option<Self> {
        Some(Self {
            matcher: Matcher::new(query)?,
            scratch: Scratch::default(),
            what,
        })
    }

    /// Whether the entry is searched and matches.
    pub(crate) fn matches(&mut self, kind: &Kind, payload: &str, meta: &str) -> bool {
        let (payload, meta) = (payload.as_bytes(), meta.as_bytes());
        searched(kind, self.what, payload)
            && self.matcher.matches_json(payload, meta, &mut self.scratch)
    }
}

/// Whether an event line is a [`Event::MessagesLeftOut`] (the messages of a batch too large for
/// one model request, written by the session actor; searchable like messages). Its name comes
/// first in the payload.
fn is_left_out(line: &[u8]) -> bool {
    line.windows(LEFT_OUT.len()).take(64).any(|w| w == LEFT_OUT)
}

/// How a [`Event::MessagesLeftOut`] payload starts.
const LEFT_OUT: &[u8] = br#"{"name":"messages.left_out""#;

/// A normalized query, ready to test entries.
pub(crate) struct Matcher {
    /// Trimmed, lower-cased query.
    text: String,
    ascii: bool,
    fuzzy: Option<Fuzzy>,
}

struct Fuzzy {
    comparator: RatioBatchComparator<u8>,
    /// Length of the joined query tokens.
    len: usize,
    /// Number of query tokens (window size).
    window: usize,
    /// Character classes of the joined query (see [`class_mask`]) and how often each occurs.
    mask: u64,
    counts: [u8; 64],
}

impl Fuzzy {
    /// Cheap necessary condition for `ratio ≥ 0.8` against a candidate of `len` bytes whose
    /// character classes are `mask`: with `ratio = 2·LCS/(a+b)`, the LCS is at most
    /// `min(a,b)` and at most the query length minus the query characters absent from the
    /// candidate.
    fn may_match(&self, len: usize, mask: u64) -> bool {
        let total = len + self.len;
        if 5 * len.min(self.len) < 2 * total {
            return false;
        }
        // At most this many query characters may be absent from the candidate.
        let Some(allowed) = (5 * self.len).checked_sub(2 * total).map(|x| x / 5) else {
            return false;
        };
        let mut absent = self.mask & !mask;
        if absent.count_ones() as usize > allowed {
            return false;
        }
        let mut missing = 0usize;
        while absent != 0 {
            missing += usize::from(self.counts[absent.trailing_zeros() as usize]);
            absent &= absent - 1;
        }
        missing <= allowed
    }
}

/// Class bit of each byte: `a-z` (upper case folded), `0-9`, `_`, `/`, `-` get bits 0..39 of a
/// 64-bit class mask; every other byte is 0 (not a token character).
static CLASSES: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let lower = (b as u8).to_ascii_lowercase();
        table[b] = match lower {
            b'a'..=b'z' => 1 << (lower - b'a'),
            b'0'..=b'9' => 1 << (26 + lower - b'0'),
            b'_' => 1 << 36,
            b'/' => 1 << 37,
            b'-' => 1 << 38,
            _ => 0,
        };
        b += 1;
    }
    table
};

/// Class bit of a byte of joined tokens (space included).
fn class_bit(b: u8) -> u64 {
    if b == b' ' {
        1 << 39
    } else {
        CLASSES[usize::from(b)]
    }
}

fn class_mask(text: &[u8]) -> u64 {
    text.iter().fold(0, |m, &b| m | class_bit(b))
}

/// Buffers reused across entries.
#[derive(Default)]
struct Scratch {
    lower: String,
    tokens: Vec<(usize, usize)>,
    masks: Vec<u64>,
    joined: Vec<u8>,
}

impl Matcher {
    pub(crate) fn new(query: &str) -> Option<Self> {
        let text = query.trim().to_lowercase();
        if text.is_empty() {
            return None;
        }
        let fuzzy = (text.chars().count() >= 3).then(|| {
            let tokens: Vec<&[u8]> = tokens(text.as_bytes())
                .map(|(a, b)| &text.as_bytes()[a..b])
                .collect();
            let joined = tokens.join(&b' ');
            let mut counts = [0u8; 64];
            for &b in &joined {
                let c = &mut counts[class_bit(b).trailing_zeros() as usize];
                *c = c.saturating_add(1);
            }
            (!tokens.is_empty()).then(|| Fuzzy {
                len: joined.len(),
                window: tokens.len(),
                mask: class_mask(&joined),
                counts,
                comparator: RatioBatchComparator::new(joined),
            })
        });
        let ascii = text.is_ascii();
        Some(Self {
            text,
            ascii,
            fuzzy: fuzzy.flatten(),
        })
    }

    /// Whether one raw tape line matches.
    fn matches_line(&self, line: &[u8], scratch: &mut Scratch) -> bool {
        match payload_meta_spans(line) {
            Some((p, m)) => self.matches_json(&line[p], &line[m], scratch),
            None => match parse_entry(line) {
                Some(e) => {
                    let payload = serde_json::to_vec(&e.payload).unwrap_or_default();
                    let meta = serde_json::to_vec(&e.meta).unwrap_or_default();
                    self.matches_json(&payload, &meta, scratch)
                }
                None => false,
            },
        }
    }

    /// Whether an entry with this payload JSON and meta JSON matches.
    fn matches_json(&self, payload: &[u8], meta: &[u8], scratch: &mut Scratch) -> bool {
        let Scratch {
            lower,
            tokens: toks,
            masks,
            joined,
        } = scratch;
        // Substring on the lower-cased JSON; `lower` then holds "<payload>\n<meta>" lower-cased
        // (`\n` cannot occur in compact JSON, so no match spans both).
        lower.clear();
        for (i, part) in [payload, meta].into_iter().enumerate() {
            if i > 0 {
                lower.push('\n');
            }
            let text = match std::str::from_utf8(part) {
                Ok(text) => std::borrow::Cow::Borrowed(text),
                Err(_) => String::from_utf8_lossy(part),
            };
            if self.ascii {
                let start = lower.len();
                lower.push_str(&text);
                lower[start..].make_ascii_lowercase();
            } else {
                lower.push_str(&text.to_lowercase());
            }
        }
        if lower.contains(&self.text) {
            return true;
        }
        let Some(fuzzy) = &self.fuzzy else {
            return false;
        };
        if !self.ascii {
            // Tokens are ASCII; re-lower-case the ASCII way so byte offsets stay simple.
            lower.make_ascii_lowercase();
        }
        let bytes = lower.as_bytes();
        let cap = MAX_CANDIDATES + fuzzy.window - 1;
        toks.clear();
        masks.clear();
        for (range, mask) in tokens_with_masks(bytes).take(cap) {
            toks.push(range);
            masks.push(mask);
        }
        let cutoff = Args::default().score_cutoff(THRESHOLD);
        for (&(a, b), &mask) in toks.iter().zip(masks.iter()).take(MAX_CANDIDATES) {
            let cand = &bytes[a..b];
            if fuzzy.may_match(cand.len(), mask)
                && fuzzy
                    .comparator
                    .similarity_with_args(cand.iter().copied(), &cutoff)
                    .is_some()
            {
                return true;
            }
        }
        if fuzzy.window < 2 || toks.len() < fuzzy.window {
            return false;
        }
        let space = class_bit(b' ');
        for (win, win_masks) in toks
            .windows(fuzzy.window)
            .zip(masks.windows(fuzzy.window))
            .take(MAX_CANDIDATES)
        {
            let len = win.iter().map(|(a, b)| b - a).sum::<usize>() + fuzzy.window - 1;
            let mask = win_masks.iter().fold(space, |m, w| m | w);
            if !fuzzy.may_match(len, mask) {
                continue;
            }
            joined.clear();
            for (i, &(a, b)) in win.iter().enumerate() {
                if i > 0 {
                    joined.push(b' ');
                }
                joined.extend_from_slice(&bytes[a..b]);
            }
            if fuzzy
                .comparator
                .similarity_with_args(joined.iter().copied(), &cutoff)
                .is_some()
            {
                return true;
            }
        }
        false
    }
}

/// Byte ranges of the `[a-z0-9_/-]+` tokens of lower-cased text.
fn tokens(text: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    tokens_with_masks(text).map(|(range, _)| range)
}

/// Tokens with the class mask of their characters (one pass, table-driven).
fn tokens_with_masks(text: &[u8]) -> impl Iterator<Item = ((usize, usize), u64)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < text.len() && CLASSES[usize::from(text[i])] == 0 {
            i += 1;
        }
        if i >= text.len() {
            return None;
        }
        let start = i;
        let mut mask = 0;
        while i < text.len() {
            let class = CLASSES[usize::from(text[i])];
            if class == 0 {
                break;
            }
            mask |= class;
            i += 1;
        }
        Some(((start, i), mask))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::Event;

    fn matches(query: &str, payload: &str) -> bool {
        Matcher::new(query).unwrap().matches_json(
            payload.as_bytes(),
            b"{}",
            &mut Scratch::default(),
        )
    }

    #[test]
    fn left_out_events_are_told_by_their_name() {
        let payload = serde_json::json!({"name": Event::MessagesLeftOut.as_str(), "data": {}});
        assert!(payload.to_string().as_bytes().starts_with(LEFT_OUT));
        let line = format!(r#"{{"id":1,"kind":"event","payload":{payload},"meta":{{}}}}"#);
        assert!(is_left_out(line.as_bytes()));
        assert!(!is_left_out(
            br#"{"id":1,"kind":"event","payload":{"name":"run"}}"#
        ));
    }

    #[test]
    fn substring_and_fuzzy() {
        let p = r#"{"role":"user","content":"Please review the database migration plan."}"#;
        assert!(matches("DATABASE migration", p));
        assert!(matches("databse migrtion", p));
        assert!(matches("migraton", p));
        assert!(!matches("kubernetes cluster", p));
        assert!(!matches("zq", p), "short queries are not fuzzy");
        assert!(Matcher::new("   ").is_none());
    }

    #[test]
    fn meta_is_searched_and_unicode_lowercased() {
        let m = Matcher::new("ÄRGER").unwrap();
        assert!(m.matches_json(
            "{\"content\":\"kein Ärger\"}".as_bytes(),
            b"{}",
            &mut Scratch::default()
        ));
        let m = Matcher::new("run-7").unwrap();
        assert!(m.matches_json(b"{}", br#"{"run_id":"run-7"}"#, &mut Scratch::default()));
    }

    #[test]
    fn tokenizer() {
        let t: Vec<_> = tokens(b"ab-c d/e_f!!x").collect();
        assert_eq!(t, vec![(0, 4), (5, 10), (12, 13)]);
    }
}
