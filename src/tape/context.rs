//! What the model sees of a tape (its context) and the tape summary (`tape.info`).
//!
//! The context is the entries strictly after the last anchor, read into typed [`ChatMessage`]s
//! by [`super::messages`]
//! (a `message` from its payload, a chat message in OpenAI's shape as the tape keeps it; a
//! `tool_call` as an assistant message with its calls; a `tool_result` as one tool message per
//! result; other kinds are not shown), and:
//! * **Handoff note.** When the last anchor has a `summary` or `next_steps`, the context starts
//!   with one user message carrying them, so a handoff carries its summary forward:
//!   ```text
//!   [context from handoff '<anchor name>']
//!   summary: <summary>
//!   next steps: <next_steps>
//!   ```
//!   (a line is left out when its field is absent). It is a `user` message because several
//!   providers require the first non-system message to come from the user.
//! * **Unanswered tool calls.** An assistant `tool_calls` message must be followed by one tool
//!   message per call. When a turn died between recording a `tool_call` and its
//!   `tool_result`, the missing results are filled in with
//!   a tool message `error: no result recorded` (with the call's id and name) so the sequence
//!   stays valid. An orphan tool result (no pending call) is a tool message without a call id
//!   in the tape's view; the model loop drops it before the request
//!   (`agent::request::sanitize_context`), since providers reject them.
//!
//! Both are read from the file, not from per-entry records (the index keeps none): the context
//! parses the bytes from the last anchor's offset (or the start) to the end of the last
//! complete line, line by line, skipping lines that are not valid entries. The counts of
//! `tape.info` are the index's counters; the last token usage is found by reading lines
//! backwards from the end, stopping at the first `run` event that has one.

use std::fmt;

use serde_json::Value;

use super::entry::{Kind, TapeEntry, parse_entry};
use super::event::Event;
use super::index::{BackLines, line_kind, lines, read_at};
use super::messages::Messages;
use super::store::FileTape;
use crate::llm::ChatMessage;

/// The entry kinds a context is built from (besides the anchor it starts after).
pub(crate) const CONTEXT_KINDS: [Kind; 3] = [Kind::Message, Kind::ToolCall, Kind::ToolResult];

/// What a guest's turn sees instead of the output of a tool call made in an owner's turn.
pub(crate) const WITHHELD: &str =
    "[output of a command run for an owner: not shown in a guest's turn]";

/// Content of a synthetic tool message answering a call whose result was never recorded.
pub(crate) const NO_RESULT: &str = "error: no result recorded";

/// Summary of a tape, as shown by `tape.info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapeInfo {
    pub name: String,
    pub entries: usize,
    pub anchors: usize,
    pub last_anchor: Option<String>,
    /// Entries after the last anchor, by position (all entries when there is no anchor).
    pub entries_since_last_anchor: usize,
    /// `usage.total_tokens` of the newest `run` event that has it.
    pub last_token_usage: Option<u64>,
}

impl fmt::Display for TapeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "tape={}", self.name)?;
        writeln!(f, "entries={}", self.entries)?;
        writeln!(f, "anchors={}", self.anchors)?;
        writeln!(
            f,
            "last_anchor={}",
            self.last_anchor.as_deref().unwrap_or("-")
        )?;
        writeln!(
            f,
            "entries_since_last_anchor={}",
            self.entries_since_last_anchor
        )?;
        match self.last_token_usage {
            Some(n) => write!(f, "last_token_usage={n}"),
            None => write!(f, "last_token_usage=unknown"),
        }
    }
}

/// The model's context of one turn, kept from step to step. The first read parses the entries
/// after the last anchor; each later read parses only what was appended since. A new anchor (a
/// handoff), a reset or a replaced file starts it over from the new last anchor.
///
/// Its positions are the store's: for a file, the identity of the file, the last anchor's byte
/// offset and the bytes read so far. It lives as long as the turn (its messages are the context
/// the turn sends anyway), so a session keeps nothing between turns.
#[derive(Debug, Default)]
pub struct ContextCursor {
    /// What the context starts after (store-defined; `None` until the first read).
    origin: Option<[u64; 3]>,
    /// How far the store has been read (store-defined: a byte offset for a file).
    read_to: u64,
    /// The last anchor's handoff note, as a user message.
    note: Option<ChatMessage>,
    messages: Messages,
    /// How much the last read parsed (store-defined: bytes for a file).
    pub last_read: u64,
    /// How the turn sees its context.
    view: View,
}

/// How a turn sees its context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    /// A guest's turn: the results of tool calls made in turns that did not run as a guest
    /// (an owner's command output, in a shared chat) are withheld.
    pub guest: bool,
    /// A tool result longer than this many characters is shown as its head and tail
    /// ([`super::output::cut`]).
    pub max_result_chars: usize,
}

impl Default for View {
    fn default() -> Self {
        Self {
            guest: false,
            max_result_chars: usize::MAX,
        }
    }
}

impl ContextCursor {
    /// A cursor for a turn that sees its context as `view`.
    pub(crate) fn new(view: View) -> Self {
        Self {
            view,
            ..Self::default()
        }
    }

    /// A cursor with this one's view that has read nothing.
    pub(crate) fn unread(&self) -> Self {
        Self::new(self.view)
    }

    /// The context: the handoff note, then the messages, with synthetic results for calls
    /// still unanswered.
    pub(crate) fn messages(&self) -> Vec<ChatMessage> {
        let mut out = Vec::with_capacity(self.messages.out.len() + self.messages.pending.len() + 1);
        out.extend(self.note.iter().cloned());
        out.extend(self.messages.out.iter().cloned());
        out.extend(self.messages.pending.iter().cloned());
        out
    }
}

#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
impl ContextCursor {
    /// Where a store whose positions are entry ids (a database) reads on: after the returned
    /// id. `origin` names the tape's state and last anchor (a change starts the cursor over
    /// from `anchor`). The entries read are given to [`Self::read_entries`].
    pub(crate) fn read_from(&mut self, origin: [u64; 3], anchor: Option<TapeEntry>) -> u64 {
        if self.origin != Some(origin) {
            *self = ContextCursor {
                origin: Some(origin),
                read_to: anchor.as_ref().map_or(0, |a| a.id),
                note: anchor
                    .as_ref()
                    .and_then(handoff_note)
                    .map(ChatMessage::user),
                ..ContextCursor::new(self.view)
            };
        }
        self.read_to
    }

    /// The context, with `entries` (of [`CONTEXT_KINDS`] after [`Self::read_from`]'s id,
    /// oldest first) taken in.
    pub(crate) fn read_entries(&mut self, entries: Vec<TapeEntry>) -> Vec<ChatMessage> {
        self.last_read = entries.len() as u64;
        if let Some(last) = entries.last() {
            self.read_to = last.id;
        }
        for entry in entries {
            self.messages.push(entry, self.view);
        }
        self.messages()
    }
}

impl FileTape {
    /// The model's context: the entries after the last anchor as chat messages (see the module
    /// documentation), preceded by the anchor's handoff note when it has one. Read from the
    /// anchor, for one-off readers; a turn keeps a [`ContextCursor`].
    pub fn context_messages(&mut self) -> anyhow::Result<Vec<ChatMessage>> {
        self.context(&mut ContextCursor::default())
    }

    /// The context through `cursor`: only the lines appended since its last read are parsed,
    /// unless the last anchor or the file changed (then it starts over from the last anchor).
    /// Only the kinds the context is made of are parsed: events (most of a tape) and system
    /// prompts are recognised from the line's header and skipped.
    pub(crate) fn context(
        &mut self,
        cursor: &mut ContextCursor,
    ) -> anyhow::Result<Vec<ChatMessage>> {
        self.read(|index, file| {
            let Some(file) = file else {
                *cursor = ContextCursor::new(cursor.view);
                return Ok(());
            };
            let last_anchor = index.last_anchor();
            let (dev, ino) = index.file_id();
            let origin = [dev, ino, last_anchor.map_or(u64::MAX, |a| a.offset)];
            let fresh = cursor.origin != Some(origin) || cursor.read_to > index.synced;
            if fresh {
                *cursor = ContextCursor {
                    origin: Some(origin),
                    read_to: last_anchor.map_or(0, |a| a.offset),
                    ..ContextCursor::new(cursor.view)
                };
            }
            let bytes = read_at(file, cursor.read_to, index.synced - cursor.read_to)?;
            let mut lines = lines(&bytes).peekable();
            if fresh && last_anchor.is_some() {
                let anchor = lines
                    .next_if(|l| line_kind(l) == Some(Kind::Anchor))
                    .and_then(parse_entry);
                cursor.note = anchor
                    .as_ref()
                    .and_then(handoff_note)
                    .map(ChatMessage::user);
            }
            lines
                .filter(|l| line_kind(l).is_none_or(|k| CONTEXT_KINDS.contains(&k)))
                .filter_map(parse_entry)
                .for_each(|entry| cursor.messages.push(entry, cursor.view));
            cursor.last_read = bytes.len() as u64;
            cursor.read_to = index.synced;
            Ok(())
        })?;
        Ok(cursor.messages())
    }

    /// The tape summary. The counts come from the index; the last token usage from the newest
    /// `run` event that has it, found by reading the file backwards.
    pub fn info(&mut self) -> anyhow::Result<TapeInfo> {
        let name = self.name().to_string();
        self.read(|index, file| {
            let mut info = TapeInfo {
                name,
                entries: index.entries,
                anchors: index.anchor_count,
                last_anchor: None,
                entries_since_last_anchor: index.entries_since_last_anchor(),
                last_token_usage: None,
            };
            let Some(file) = file else { return Ok(info) };
            if let Some(slot) = index.last_anchor() {
                let anchor = parse_entry(&read_at(file, slot.offset, slot.len)?);
                info.last_anchor = anchor.as_ref().and_then(|a| a.name()).map(str::to_string);
            }
            let mut back = BackLines::new(file, index.synced);
            while let Some(line) = back.next_line()? {
                if !contains(line, b"total_tokens") || line_kind(line) != Some(Kind::Event) {
                    continue;
                }
                let Some(event) = parse_entry(line) else {
                    continue;
                };
                if !event.is_event(Event::Run) {
                    continue;
                }
                let usage = event
                    .payload
                    .pointer("/data/usage/total_tokens")
                    .and_then(Value::as_u64);
                if usage.is_some() {
                    info.last_token_usage = usage;
                    break;
                }
            }
            Ok(info)
        })
    }
}

pub(crate) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The handoff note of an anchor with a summary or next steps.
pub(crate) fn handoff_note(anchor: &TapeEntry) -> Option<String> {
    let state = anchor.state()?;
    let field = |key: &str| {
        state
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
    };
    let (summary, next) = (field("summary"), field("next_steps"));
    if summary.is_none() && next.is_none() {
        return None;
    }
    let mut note = format!(
        "[context from handoff '{}']",
        anchor.name().unwrap_or("handoff")
    );
    if let Some(s) = summary {
        note.push_str("\nsummary: ");
        note.push_str(s);
    }
    if let Some(n) = next {
        note.push_str("\nnext steps: ");
        note.push_str(n);
    }
    Some(note)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Part, Role};
    use crate::tape::messages::{chat_message, select_messages};
    use serde_json::json;

    /// The messages as the tape records them (as they were before messages were typed).
    fn records(messages: &[ChatMessage]) -> Vec<Value> {
        messages.iter().map(ChatMessage::to_record).collect()
    }

    fn entry(id: u64, kind: Kind, payload: Value) -> TapeEntry {
        TapeEntry {
            id,
            kind,
            payload,
            meta: json!({}),
            date: String::new(),
        }
    }

    #[test]
    fn reference_example_pairs_results_with_calls() {
        let entries = vec![
            entry(1, Kind::Message, json!({"role":"user","content":"hello"})),
            entry(
                2,
                Kind::ToolCall,
                json!({"calls":[
                {"id":"call-1","type":"function","function":{"name":"fs.write","arguments":"{}"}},
                {"id":"call-2","type":"function","function":{"name":"fs.read","arguments":"{}"}}]}),
            ),
            entry(
                3,
                Kind::ToolResult,
                json!({"results":["ok", {"content":"hi"}]}),
            ),
            entry(
                4,
                Kind::Message,
                json!({"role":"assistant","content":"done"}),
            ),
        ];
        let out = records(&select_messages(entries.clone()));
        assert_eq!(out.len(), 5);
        assert_eq!(out[0], json!({"role":"user","content":"hello"}));
        assert_eq!(out[1]["role"], "assistant");
        assert_eq!(out[1]["content"], "");
        assert_eq!(out[1]["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(
            out[2],
            json!({"role":"tool","content":"ok","tool_call_id":"call-1","name":"fs.write"})
        );
        assert_eq!(
            out[3],
            json!({"role":"tool","content":"{\"content\": \"hi\"}","tool_call_id":"call-2","name":"fs.read"})
        );
        assert_eq!(out[4], json!({"role":"assistant","content":"done"}));
    }

    #[test]
    fn orphan_result_has_no_call_id() {
        let out = records(&select_messages([entry(
            1,
            Kind::ToolResult,
            json!({"results":[{"status":"ok"}]}),
        )]));
        assert_eq!(
            out,
            vec![json!({"role":"tool","content":"{\"status\": \"ok\"}"})]
        );
    }

    #[test]
    fn unanswered_calls_get_synthetic_results() {
        let call = json!({"id":"c1","type":"function","function":{"name":"bash","arguments":"{}"}});
        let out = records(&select_messages([
            entry(1, Kind::ToolCall, json!({"calls":[call]})),
            entry(2, Kind::Message, json!({"role":"user","content":"again"})),
        ]));
        assert_eq!(
            out[1],
            json!({"role":"tool","content":NO_RESULT,"tool_call_id":"c1","name":"bash"})
        );
        assert_eq!(out[2]["content"], "again");
    }

    #[test]
    fn system_event_error_and_empty_calls_are_dropped() {
        let out = select_messages([
            entry(1, Kind::System, json!({"content":"sys"})),
            entry(2, Kind::Event, json!({"name":"run"})),
            entry(3, Kind::Error, json!({"kind":"x","message":"y"})),
            entry(4, Kind::ToolCall, json!({"calls":[]})),
        ]);
        assert!(out.is_empty());
    }

    #[test]
    fn note_renders_summary_and_next_steps() {
        let a = entry(
            1,
            Kind::Anchor,
            json!({"name":"phase-2","state":{"summary":"did A","next_steps":"do B"}}),
        );
        assert_eq!(
            handoff_note(&a).unwrap(),
            "[context from handoff 'phase-2']\nsummary: did A\nnext steps: do B"
        );
        let plain = entry(
            1,
            Kind::Anchor,
            json!({"name":"session/start","state":{"owner":"human"}}),
        );
        assert!(handoff_note(&plain).is_none());
    }

    /// Messages read from the tape and written to the OpenAI wire are the bytes they were
    /// recorded as (what Bub sent before messages were typed); a call's signature stays on the
    /// tape.
    #[test]
    fn tape_messages_reach_the_openai_wire_byte_for_byte() {
        let wire = |m: &ChatMessage| {
            let shape = crate::llm::message::OpenAiShape {
                message: m,
                record: false,
            };
            serde_json::to_string(&shape).unwrap()
        };
        let messages = [
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "hi"}),
            json!({"role": "user", "content": [{"type": "text", "text": "this?"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AA=="}}]}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "fs_read", "arguments": "{\"path\":\"a\"}"}}]}),
            json!({"role": "tool", "content": "text", "tool_call_id": "c1", "name": "fs_read"}),
            json!({"role": "assistant", "content": "done"}),
        ];
        for message in messages {
            let typed = chat_message(&message);
            assert_eq!(wire(&typed), message.to_string());
            assert_eq!(typed.to_record(), message);
        }
        let mut call = json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "x", "arguments": "{}"}}]});
        let typed = chat_message(&call);
        call["tool_calls"][0]["thought_signature"] = json!("sig");
        let signed = chat_message(&call);
        assert_eq!(
            wire(&signed),
            wire(&typed),
            "no signature on the OpenAI wire"
        );
        assert_eq!(signed.to_record(), call, "the signature stays on the tape");
    }

    /// A payload in OpenAI's shape reads into the typed message: images as parts (another URL
    /// as a note), a call's signature kept, the saved images' paths kept.
    #[test]
    fn openai_payloads_read_into_the_typed_model() {
        let user = chat_message(&json!({"role": "user", "images": ["a.jpg"], "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]}));
        assert_eq!(
            user.content,
            [
                Part::Text("look".into()),
                Part::Image {
                    mime: "image/png".into(),
                    data: "AAAA".into()
                },
                Part::Text("[image: https://x/cat.png]".into()),
            ]
        );
        assert_eq!(user.images, ["a.jpg"]);
        let call = json!({"id": "c1", "type": "function", "thought_signature": "sig",
            "function": {"name": "fs_read", "arguments": "{\"path\":\"a\"}"}});
        let assistant =
            chat_message(&json!({"role": "assistant", "content": "", "tool_calls": [call]}));
        assert_eq!(assistant.role, Role::Assistant);
        assert_eq!(
            assistant.tool_calls[0].thought_signature.as_deref(),
            Some("sig")
        );
        assert_eq!(assistant.tool_calls[0].to_record(), call);
        let tool = chat_message(
            &json!({"role": "tool", "content": "x", "tool_call_id": "c1", "name": "fs_read"}),
        );
        assert_eq!(tool, ChatMessage::tool_result("c1", "fs_read", "x"));
    }

    #[test]
    fn info_display_has_one_field_per_line() {
        let info = TapeInfo {
            name: "bub:x".into(),
            entries: 3,
            anchors: 1,
            last_anchor: None,
            entries_since_last_anchor: 2,
            last_token_usage: None,
        };
        assert_eq!(
            info.to_string(),
            "tape=bub:x\nentries=3\nanchors=1\nlast_anchor=-\nentries_since_last_anchor=2\nlast_token_usage=unknown"
        );
    }

    #[test]
    fn context_of_a_mixed_tape_keeps_messages_and_lines_in_foreign_field_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut tape = FileTape::open_path(path.clone(), "t".into()).unwrap();
        tape.handoff("phase", Some("did A"), None).unwrap();
        tape.event(Event::LoopStepStart, json!({"step": 1}))
            .unwrap();
        tape.append(Kind::System, json!({"content": "be brief"}), json!({}))
            .unwrap();
        tape.append(
            Kind::Message,
            json!({"role":"user","content":"hi"}),
            json!({}),
        )
        .unwrap();
        tape.append(Kind::Error, json!({"kind":"x","message":"m"}), json!({}))
            .unwrap();
        // Lines written by another program, fields in another order: read by a full parse.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(
            &mut file,
            b"{\"kind\":\"event\",\"id\":6,\"payload\":{\"name\":\"x\",\"data\":{}}}\n\
              {\"kind\":\"message\",\"id\":7,\"payload\":{\"role\":\"assistant\",\"content\":\"hello\"}}\n",
        )
        .unwrap();
        let context = records(&tape.context_messages().unwrap());
        assert_eq!(
            context,
            vec![
                json!({"role":"user","content":"[context from handoff 'phase']\nsummary: did A"}),
                json!({"role":"user","content":"hi"}),
                json!({"role":"assistant","content":"hello"}),
            ]
        );
    }

    /// A tape whose every kind of change is followed by a read through one cursor: the cursor's
    /// context equals a fresh read each time, and after the first read it parses only the
    /// bytes appended since (or starts over from the new anchor).
    #[test]
    fn a_cursor_reads_only_what_was_appended_and_matches_a_fresh_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut tape = FileTape::open_path(path.clone(), "t".into()).unwrap();
        let mut cursor = ContextCursor::default();
        let call = json!({"id":"c1","type":"function","function":{"name":"bash","arguments":"{}"}});
        let user = |text: &str| json!({"role": "user", "content": text});
        type Change = Box<dyn Fn(&mut FileTape)>;
        let steps: Vec<Change> = vec![
            Box::new(|t| t.ensure_bootstrap().unwrap()),
            Box::new(move |t| drop(t.append(Kind::Message, user("hi"), json!({})).unwrap())),
            Box::new(|t| drop(t.event(Event::Run, json!({})).unwrap())),
            Box::new(move |t| {
                drop(
                    t.append(Kind::ToolCall, json!({"calls": [call.clone()]}), json!({}))
                        .unwrap(),
                )
            }),
            Box::new(|t| {
                drop(
                    t.append(Kind::ToolResult, json!({"results": ["ok"]}), json!({}))
                        .unwrap(),
                )
            }),
            Box::new(|t| t.handoff("phase-2", Some("did A"), Some("do B")).unwrap()),
            Box::new(move |t| drop(t.append(Kind::Message, user("next"), json!({})).unwrap())),
            Box::new(|t| drop(t.reset(false).unwrap())),
            Box::new(move |t| drop(t.append(Kind::Message, user("fresh"), json!({})).unwrap())),
        ];
        for (i, step) in steps.iter().enumerate() {
            let before = std::fs::metadata(&path).map_or(0, |m| m.len());
            step(&mut tape);
            let after = std::fs::metadata(&path).unwrap().len();
            let through_cursor = tape.context(&mut cursor).unwrap();
            let fresh = FileTape::open_path(path.clone(), "t".into())
                .unwrap()
                .context_messages()
                .unwrap();
            assert_eq!(through_cursor, fresh, "after step {i}");
            // Appends (not the first read, a handoff or a reset) parse only the new bytes.
            if matches!(i, 1 | 2 | 3 | 4 | 6 | 8) {
                assert_eq!(cursor.last_read, after - before, "bytes parsed at step {i}");
            }
        }
        assert_eq!(
            records(&tape.context(&mut cursor).unwrap()),
            vec![user("fresh")]
        );
        assert_eq!(cursor.last_read, 0, "nothing appended, nothing parsed");
    }

    #[test]
    fn a_guests_context_withholds_the_output_of_other_turns() {
        let entry = |id, kind: Kind, payload: Value, role: Option<&str>| TapeEntry {
            id,
            kind,
            payload,
            meta: role.map_or(json!({}), |r| json!({"role": r})),
            date: String::new(),
        };
        let call = json!({"calls": [{"id": "c", "type": "function",
            "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}}]});
        let mut messages = Messages::default();
        let guest = View {
            guest: true,
            ..View::default()
        };
        for role in [Some("owner"), None, Some("guest")] {
            messages.push(entry(1, Kind::ToolCall, call.clone(), role), guest);
            let result = json!({"results": [format!("output of {role:?}")]});
            messages.push(entry(2, Kind::ToolResult, result, role), guest);
        }
        let contents: Vec<String> = messages
            .out
            .iter()
            .filter(|m| m.role == Role::Tool)
            .map(ChatMessage::text)
            .collect();
        assert_eq!(contents, [WITHHELD, WITHHELD, "output of Some(\"guest\")"]);
        let arguments: Vec<&str> = messages
            .out
            .iter()
            .filter_map(|m| m.tool_calls.first())
            .map(|c| c.arguments.as_str())
            .collect();
        assert_eq!(arguments, ["{}", "{}", "{\"cmd\":\"ls\"}"]);
    }
}
