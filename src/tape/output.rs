//! Long tool results: what the model is shown of one (its head and tail, and how to read the
//! rest — [`cut`]), and the whole of one found by its call id ([`FileTape::output`], for the
//! `tape.output` tool). The tape always keeps the whole result.

use serde_json::Value;

use super::context::contains;
use super::entry::{Kind, parse_entry};
use super::index::{BackLines, line_kind};
use super::store::FileTape;

/// `result` as the model is shown it: whole when it has at most `max` characters; else its
/// first and last `max / 2` characters around one line saying what was cut and how to read it
/// (`call_id`: the call whose result it is). The same input always gives the same bytes.
pub(crate) fn cut(result: String, max: usize, call_id: Option<&str>) -> String {
    let total = result.chars().count();
    if total <= max {
        return result;
    }
    let keep = max / 2;
    let head_end = byte_at(&result, keep);
    let tail_start = byte_at(&result, total - keep);
    let how = match call_id {
        Some(id) => format!("; read them with tape.output call_id={id} offset={keep}"),
        None => String::new(),
    };
    format!(
        "{}\n[… {} of {total} characters cut here{how}]\n{}",
        &result[..head_end],
        total - 2 * keep,
        &result[tail_start..]
    )
}

/// The byte offset of character `n` of `text` (its length past the end).
pub(crate) fn byte_at(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

impl FileTape {
    /// The whole result of the tool call `call_id` (the newest with that id) and its entry's
    /// meta; `None` when the tape has no result for it. One backward pass over the file: a
    /// `tool_result` is remembered until the `tool_call` before it is met.
    pub fn output(&mut self, call_id: &str) -> anyhow::Result<Option<(String, Value)>> {
        self.read(|index, file| {
            let Some(file) = file else { return Ok(None) };
            let mut back = BackLines::new(file, index.synced);
            let mut newer_result: Option<Vec<u8>> = None;
            while let Some(line) = back.next_line()? {
                match line_kind(line) {
                    Some(Kind::ToolResult) => newer_result = Some(line.to_vec()),
                    Some(Kind::ToolCall) => {
                        let result = newer_result.take();
                        if call_id.is_empty() || !contains(line, call_id.as_bytes()) {
                            continue;
                        }
                        let Some(call) = parse_entry(line) else {
                            continue;
                        };
                        let calls = call.payload["calls"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default();
                        let Some(at) = calls.iter().position(|c| c["id"] == call_id) else {
                            continue;
                        };
                        let Some(entry) = result.as_deref().and_then(parse_entry) else {
                            return Ok(None);
                        };
                        let text = match &entry.payload["results"][at] {
                            Value::Null => return Ok(None),
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        return Ok(Some((text, entry.meta)));
                    }
                    _ => {}
                }
            }
            Ok(None)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_result_keeps_its_head_and_tail() {
        assert_eq!(cut("short".into(), 10, Some("c1")), "short");
        let long: String = ('a'..='z').collect();
        let shown = cut(long.clone(), 10, Some("call_7"));
        assert_eq!(
            shown,
            "abcde\n[… 16 of 26 characters cut here; read them with tape.output call_id=call_7 offset=5]\nvwxyz"
        );
        assert_eq!(cut(long.clone(), 10, Some("call_7")), shown, "stable");
        let wide = "é".repeat(30);
        assert!(cut(wide, 10, None).starts_with("ééééé\n[… 20 of 30 characters cut here]\n"));
    }
}
