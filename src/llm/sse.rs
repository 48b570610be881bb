//! Streamed replies: an incremental Server-Sent-Events decoder, the [`Accumulate`] trait each
//! API's stream folder implements (Anthropic's and Gemini's are in their modules), and the
//! OpenAI one, which folds `chat.completion.chunk` deltas into one [`ChatResponse`].
//!
//! The decoder accepts bytes exactly as they come off the socket: events split anywhere (even
//! inside a UTF-8 character), `\n`, `\r\n` or `\r` line endings, `:` comment lines (keep-alives),
//! multi-line `data:` fields. The accumulator concatenates text deltas and merges tool-call
//! fragments by their `index` (id, type and name arrive in the first fragment of an index; the
//! `arguments` pieces are concatenated). Both are pure, so they are tested without a server.

use std::collections::BTreeMap;

use serde_json::Value;

use super::response::{arguments_text, error_object};
use super::{ChatResponse, LlmError, ToolCall};

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field, when the server sent one.
    pub event: Option<String>,
    /// The `data:` lines joined by `\n`.
    pub data: String,
}

impl SseEvent {
    /// The event's data as JSON; `None` for an event without data.
    pub(crate) fn json(&self) -> Result<Option<serde_json::Value>, LlmError> {
        let data = self.data.trim();
        if data.is_empty() {
            return Ok(None);
        }
        serde_json::from_str(data)
            .map(Some)
            .map_err(|e| LlmError::InvalidResponse(format!("malformed JSON in stream ({e})")))
    }
}

/// Incremental SSE decoder: feed it chunks with [`SseDecoder::push`], call
/// [`SseDecoder::finish`] at end of stream.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous byte was `\r`, so a following `\n` belongs to the same line ending.
    after_cr: bool,
    /// `data:` lines of the event being built.
    data: Vec<String>,
    event: Option<String>,
}

impl SseDecoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Consumes a chunk and returns the events it completed.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in chunk {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(ev) = self.end_line(&String::from_utf8_lossy(&line)) {
                        out.push(ev);
                    }
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(b);
                }
            }
        }
        out
    }

    /// Flushes an unterminated last line / event at end of stream (lenient towards servers that
    /// omit the final blank line).
    pub(crate) fn finish(&mut self) -> Option<SseEvent> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            if let Some(ev) = self.end_line(&String::from_utf8_lossy(&line)) {
                return Some(ev);
            }
        }
        self.end_line("")
    }

    /// Handles one complete line; a blank line dispatches the pending event.
    fn end_line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = self.event.take();
            if self.data.is_empty() {
                return None;
            }
            let data = std::mem::take(&mut self.data).join("\n");
            return Some(SseEvent { event, data });
        }
        if line.starts_with(':') {
            return None; // comment / keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => self.data.push(value.to_owned()),
            "event" => self.event = Some(value.to_owned()),
            _ => {} // id, retry and unknown fields do not matter here
        }
        None
    }
}

/// What folds one API's streamed events into a [`ChatResponse`].
pub(crate) trait Accumulate: Send {
    /// Handles one event; returns the text delta it carried (possibly empty). An error event
    /// becomes an [`LlmError::Http`].
    fn event(&mut self, event: &SseEvent) -> Result<String, LlmError>;
    /// Whether the stream said it is over (nothing more needs to be read).
    fn is_done(&self) -> bool;
    /// Whether the reply reached a natural end (a stream cut before is invalid).
    fn is_complete(&self) -> bool;
    /// The accumulated response.
    fn finish(self: Box<Self>) -> ChatResponse;
}

impl Accumulate for StreamAccumulator {
    fn event(&mut self, event: &SseEvent) -> Result<String, LlmError> {
        self.handle_data(&event.data)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn is_complete(&self) -> bool {
        self.done || self.finish_reason.is_some()
    }

    fn finish(self: Box<Self>) -> ChatResponse {
        StreamAccumulator::finish(*self)
    }
}

/// A tool call being assembled from fragments.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Folds streamed chunks into a [`ChatResponse`].
#[derive(Debug, Default)]
pub(crate) struct StreamAccumulator {
    content: String,
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<super::Usage>,
    finish_reason: Option<String>,
    done: bool,
}

impl StreamAccumulator {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Handles the `data` of one event. Returns the text delta it carried (possibly empty).
    /// `[DONE]` marks the end; an `{"error": ...}` chunk becomes an [`LlmError::Http`].
    pub(crate) fn handle_data(&mut self, data: &str) -> Result<String, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(String::new());
        }
        if data.is_empty() {
            return Ok(String::new());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            LlmError::InvalidResponse(format!("malformed JSON in stream chunk ({e})"))
        })?;
        self.handle_chunk(&chunk)
    }

    /// Handles one parsed `chat.completion.chunk`.
    pub(crate) fn handle_chunk(&mut self, chunk: &Value) -> Result<String, LlmError> {
        if let Some(err) = error_object(chunk) {
            return Err(err);
        }
        if let Some(usage) = chunk.get("usage").and_then(super::Usage::from_openai) {
            self.usage = Some(usage);
        }
        let mut text = String::new();
        let choices = chunk.get("choices").and_then(Value::as_array);
        // Only the first choice (index 0) is used; `choices: []` is the usage-only chunk.
        for choice in choices.into_iter().flatten() {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_owned());
            }
            // Some servers put a full `message` instead of `delta` in their last chunk.
            let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) else {
                continue;
            };
            if let Some(piece) = delta.get("content").and_then(Value::as_str) {
                text.push_str(piece);
            }
            if let Some(frags) = delta.get("tool_calls").and_then(Value::as_array) {
                for (pos, frag) in frags.iter().enumerate() {
                    self.merge_fragment(pos as u64, frag);
                }
            }
        }
        self.content.push_str(&text);
        Ok(text)
    }

    /// Merges one tool-call fragment into the call with the same `index`.
    fn merge_fragment(&mut self, pos: u64, frag: &Value) {
        let index = frag.get("index").and_then(Value::as_u64).unwrap_or(pos);
        let call = self.calls.entry(index).or_default();
        if let Some(id) = frag
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            call.id = id.to_owned();
        }
        let function = frag.get("function").unwrap_or(&Value::Null);
        if let Some(name) = function
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            // The name comes whole in the first fragment; servers that repeat it are tolerated.
            if call.name.is_empty() {
                call.name = name.to_owned();
            }
        }
        match function.get("arguments") {
            Some(Value::String(piece)) => call.arguments.push_str(piece),
            Some(Value::Null) | None => {}
            // A server that sends the arguments as an object sends them whole.
            other => call.arguments = arguments_text(other),
        }
    }

    /// The accumulated response. Calls without a name are dropped; missing ids become
    /// `call_<index>` and empty arguments `{}`.
    pub(crate) fn finish(self) -> ChatResponse {
        let tool_calls = self
            .calls
            .into_iter()
            .filter(|(_, c)| !c.name.is_empty())
            .map(|(index, c)| ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{index}")
                } else {
                    c.id
                },
                name: c.name,
                arguments: if c.arguments.trim().is_empty() {
                    "{}".into()
                } else {
                    c.arguments
                },
                thought_signature: None,
            })
            .collect();
        ChatResponse {
            content: (!self.content.is_empty()).then_some(self.content),
            tool_calls,
            usage: self.usage,
            finish_reason: self.finish_reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Feeds `stream` to a decoder in pieces of `size` bytes and returns all event data.
    fn decode_in_pieces(stream: &[u8], size: usize) -> Vec<String> {
        let mut dec = SseDecoder::new();
        let mut out: Vec<String> = Vec::new();
        for piece in stream.chunks(size) {
            out.extend(dec.push(piece).into_iter().map(|e| e.data));
        }
        out.extend(dec.finish().map(|e| e.data));
        out
    }

    #[test]
    fn events_split_anywhere_decode_the_same() {
        let stream = "data: {\"a\":\"héllo\"}\n\n: keep-alive\n\ndata: [DONE]\n\n";
        for size in 1..=stream.len() {
            assert_eq!(
                decode_in_pieces(stream.as_bytes(), size),
                vec!["{\"a\":\"héllo\"}", "[DONE]"],
                "piece size {size}"
            );
        }
    }

    #[test]
    fn crlf_and_cr_line_endings() {
        for sep in ["\r\n", "\r"] {
            let stream =
                format!("data: one{sep}{sep}:ping{sep}{sep}event: x{sep}data: two{sep}{sep}");
            for size in [1, 2, 3, 100] {
                let mut dec = SseDecoder::new();
                let mut evs = Vec::new();
                for piece in stream.as_bytes().chunks(size) {
                    evs.extend(dec.push(piece));
                }
                assert_eq!(evs.len(), 2, "sep {sep:?} size {size}");
                assert_eq!(
                    evs[0],
                    SseEvent {
                        event: None,
                        data: "one".into()
                    }
                );
                assert_eq!(
                    evs[1],
                    SseEvent {
                        event: Some("x".into()),
                        data: "two".into()
                    }
                );
            }
        }
    }

    #[test]
    fn multi_line_data_and_missing_final_blank_line() {
        let mut dec = SseDecoder::new();
        assert!(dec.push(b"data: a\ndata:b\n").is_empty());
        assert_eq!(dec.push(b"\n")[0].data, "a\nb");
        assert!(dec.push(b"data: [DONE]").is_empty());
        assert_eq!(dec.finish().unwrap().data, "[DONE]");
        assert_eq!(dec.finish(), None);
    }

    fn chunk(delta: Value, finish: Value) -> String {
        json!({"object":"chat.completion.chunk","choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
            .to_string()
    }

    #[test]
    fn text_deltas_and_usage_chunk() {
        let mut acc = StreamAccumulator::new();
        let mut seen = Vec::new();
        for data in [
            chunk(json!({"role":"assistant","content":""}), Value::Null),
            chunk(json!({"content":"Hel"}), Value::Null),
            chunk(json!({"content":"lo"}), Value::Null),
            chunk(json!({}), json!("stop")),
            json!({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}).to_string(),
            "[DONE]".into(),
        ] {
            seen.push(acc.handle_data(&data).unwrap());
        }
        assert!(acc.is_done());
        assert_eq!(seen.concat(), "Hello");
        let r = acc.finish();
        assert_eq!(r.content.as_deref(), Some("Hello"));
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        assert_eq!(r.usage.unwrap().total(), 7);
        assert!(r.tool_calls.is_empty());
    }

    #[test]
    fn tool_call_fragments_merge_by_index() {
        let mut acc = StreamAccumulator::new();
        let frag = |v: Value| chunk(json!({"tool_calls": [v]}), Value::Null);
        for data in [
            chunk(
                json!({"role":"assistant","content":null,"tool_calls":[
                    {"index":0,"id":"call_a","type":"function","function":{"name":"get_time","arguments":""}}]}),
                Value::Null,
            ),
            frag(
                json!({"index":1,"id":"call_b","type":"function","function":{"name":"ls","arguments":"{\"pa"}}),
            ),
            frag(json!({"index":0,"function":{"arguments":"{\"tz\":"}})),
            frag(json!({"index":1,"function":{"arguments":"th\":\".\"}"}})),
            frag(json!({"index":0,"function":{"arguments":"\"UTC\"}"}})),
            chunk(json!({}), json!("tool_calls")),
            "[DONE]".into(),
        ] {
            assert_eq!(acc.handle_data(&data).unwrap(), "");
        }
        let r = acc.finish();
        assert_eq!(r.content, None);
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            r.tool_calls,
            vec![
                ToolCall {
                    id: "call_a".into(),
                    name: "get_time".into(),
                    arguments: "{\"tz\":\"UTC\"}".into(),
                    thought_signature: None,
                },
                ToolCall {
                    id: "call_b".into(),
                    name: "ls".into(),
                    arguments: "{\"path\":\".\"}".into(),
                    thought_signature: None,
                },
            ]
        );
    }

    #[test]
    fn lenient_fragments() {
        let mut acc = StreamAccumulator::new();
        // No index, repeated name, object arguments, missing id.
        acc.handle_data(&chunk(
            json!({"tool_calls":[{"function":{"name":"ls","arguments":{"path":"."}}}]}),
            Value::Null,
        ))
        .unwrap();
        acc.handle_data(&chunk(
            json!({"tool_calls":[{"function":{"name":"ls"}}]}),
            json!("tool_calls"),
        ))
        .unwrap();
        assert!(acc.is_complete() && !acc.is_done());
        let r = acc.finish();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].id, "call_0");
        assert_eq!(r.tool_calls[0].name, "ls");
        assert_eq!(r.tool_calls[0].arguments, "{\"path\":\".\"}");
    }

    #[test]
    fn error_and_malformed_chunks() {
        let mut acc = StreamAccumulator::new();
        let err = acc.handle_data(r#"{"error":{"code":503,"message":"overloaded"}}"#);
        assert_eq!(
            err,
            Err(LlmError::Http {
                status: 503,
                message: "overloaded".into()
            })
        );
        assert!(matches!(
            acc.handle_data("{oops"),
            Err(LlmError::InvalidResponse(_))
        ));
    }
}
