//! Text for a terminal: what came from a chat (a job's message, a memory entry, a username, a
//! learned skill, an error) is printed by the CLI with its control characters made visible, so
//! it cannot rewrite the screen, set the window title or write the clipboard (OSC 52), nor
//! reorder what is shown around it (bidi overrides).
//!
//! Escaped: C0 controls (U+0000–U+001F) except `\t`, and `\n` where a multi-line text needs it;
//! DEL; the C1 controls (U+0080–U+009F); the bidi embeddings, overrides and isolates (U+202A–
//! U+202E, U+2066–U+2069). They become `\x1b`, `\n`, `\r`, `\u{9b}`, `\u{202e}`. Text without
//! them is not copied.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` as a terminal may show it over several lines: newlines and tabs stay.
pub fn safe(text: &str) -> Cow<'_, str> {
    escape(text, Style::Text)
}

/// `text` as one line of a listing: newlines are escaped too.
pub fn safe_line(text: &str) -> Cow<'_, str> {
    escape(text, Style::Line)
}

/// JSON text (as serde_json writes it: C0 controls already escaped in strings, newlines only
/// between values) with DEL, C1 and bidi controls escaped the JSON way (`\u009b`): still the
/// same JSON value.
pub(crate) fn safe_json(json: &str) -> Cow<'_, str> {
    escape(json, Style::Json)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    Text,
    Line,
    Json,
}

fn escape(text: &str, style: Style) -> Cow<'_, str> {
    let kept = |c: char| c == '\t' || (style != Style::Line && c == '\n');
    let unsafe_char = |c: char| !kept(c) && needs_escape(c);
    let Some(first) = text.find(unsafe_char) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        match c {
            c if !unsafe_char(c) => out.push(c),
            c if style == Style::Json => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) <= 0x7f => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

/// A control character or a bidi control.
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        for text in [
            "",
            "hello",
            "tab\tand\nnewline",
            "héllo — 日本 🙂",
            "a\\x1b",
        ] {
            assert!(
                matches!(safe(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
        }
        assert!(matches!(safe_line("one\tline"), Cow::Borrowed(_)));
    }

    #[test]
    fn escape_sequences_become_visible() {
        let osc52 = "\x1b]52;c;SGVsbG8=\x07\x1b[2J";
        assert_eq!(safe(osc52), "\\x1b]52;c;SGVsbG8=\\x07\\x1b[2J");
        assert_eq!(safe("title\x1b]0;pwned\x07"), "title\\x1b]0;pwned\\x07");
        assert_eq!(
            safe("nul\0 bell\x07 del\x7f cr\r"),
            "nul\\x00 bell\\x07 del\\x7f cr\\r"
        );
        assert_eq!(safe("csi\u{9b}2J next\u{85}"), "csi\\u{9b}2J next\\u{85}");
        assert_eq!(
            safe("a\u{202e}evil\u{202c} \u{2066}x\u{2069}"),
            "a\\u{202e}evil\\u{202c} \\u{2066}x\\u{2069}"
        );
    }

    #[test]
    fn newlines_stay_in_text_and_are_escaped_in_a_line() {
        assert_eq!(safe("one\ntwo\x1b"), "one\ntwo\\x1b");
        assert_eq!(safe_line("one\ntwo\tthree"), "one\\ntwo\tthree");
        assert_eq!(safe_line("fake\r\nrow"), "fake\\r\\nrow");
    }

    #[test]
    fn json_stays_the_same_value() {
        let value = serde_json::json!({"error": "x\u{9b}2J\u{202e}\x1b[2J\x7f\nend"});
        let text = serde_json::to_string_pretty(&value).unwrap();
        let safe = safe_json(&text);
        assert!(
            !safe.chars().any(|c| needs_escape(c) && c != '\n'),
            "{safe}"
        );
        assert!(
            safe.contains("x\\u009b2J\\u202e\\u001b[2J\\u007f\\nend"),
            "{safe}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).unwrap(),
            value
        );
    }

    #[test]
    fn escaping_twice_changes_nothing_more() {
        let once = safe_line("x\x1b[31m\n\u{202e}").into_owned();
        assert!(matches!(safe(&once), Cow::Borrowed(_)));
        assert!(!once.chars().any(|c| c.is_control()));
    }
}
