//! How a tape's entries are drawn on the timeline, as list items of `ol#timeline`.
//!
//! * What people and the agent wrote is Markdown ([`super::markdown`]): a bubble per message.
//! * Bub's own prompts are runtime notes, not a person's bubble: a prompt whose meta records
//!   an `origin` (`followup` — "Continue the task." or a command's output, `scheduled`,
//!   `subagent`; written by the agent's loop), and on tapes older than that marker a loop
//!   prompt after the first (its meta has the run's id but no `time`, which only a turn's first
//!   prompt carries). Messages carried over by a compaction are notes too.
//! * A step's bookkeeping — `loop.step.start`, `run`, `loop.step.finish` and the turn's
//!   `loop.result` — is one line where the step starts (`step 2 · 1.2 s · 3,410 tok · bash ✓`):
//!   a `<details>` that opens, without a script, on what those records held. The tool calls
//!   and results keep their own lines after it.
//!
//! The page's script appends what `/session/live` draws and replaces an item with the same id,
//! so a step line drawn while its step ran is drawn again, in place, when its step ends
//! ([`draw_since`]).

use maud::{Markup, html};
use serde_json::Value;

use super::Console;
use super::markdown;
use super::page::{self, encode};
use crate::tape::{Event, Kind, TapeEntry};

/// The longest argument or result shown (characters).
const CUT: usize = 4_000;

/// The bookkeeping events folded into a step's line.
const BOOKKEEPING: [Event; 4] = [
    Event::LoopStepStart,
    Event::Run,
    Event::LoopStepFinish,
    Event::LoopResult,
];

/// What the timeline draws: an entry as it is, or a step's bookkeeping as one line.
enum Item<'a> {
    Entry(&'a TapeEntry),
    Step(Step<'a>),
}

/// A step of the model loop: its bookkeeping records, and the tool calls and results that
/// came between them.
#[derive(Default)]
struct Step<'a> {
    records: Vec<&'a TapeEntry>,
    calls: Vec<&'a TapeEntry>,
    results: Vec<&'a TapeEntry>,
}

/// The items of `entries` (in tape order), the bookkeeping of each step folded into its line.
fn fold(entries: &[TapeEntry]) -> Vec<Item<'_>> {
    let mut items: Vec<Item<'_>> = Vec::new();
    // The item of the step whose records come now.
    let mut open: Option<usize> = None;
    for entry in entries {
        let bookkeeping = BOOKKEEPING.iter().find(|e| entry.is_event(**e)).copied();
        match (bookkeeping, open) {
            (Some(Event::LoopStepStart), _) | (Some(_), None) => {
                open = Some(items.len());
                items.push(Item::Step(Step {
                    records: vec![entry],
                    ..Step::default()
                }));
            }
            (Some(_), Some(at)) => {
                if let Item::Step(step) = &mut items[at] {
                    step.records.push(entry);
                }
            }
            (None, _) => {
                if let Some(Item::Step(step)) = open.map(|at| &mut items[at]) {
                    match entry.kind {
                        Kind::ToolCall => step.calls.push(entry),
                        Kind::ToolResult => step.results.push(entry),
                        _ => {}
                    }
                }
                items.push(Item::Entry(entry));
            }
        }
        if entry.is_event(Event::LoopResult) {
            open = None;
        }
    }
    items
}

/// The entries as list items; the files of `session`'s messages as links.
pub(super) fn draw(c: &Console, entries: &[TapeEntry], session: Option<&str>) -> Markup {
    html! { @for item in fold(entries) { (item.draw(c, session)) } }
}

/// What is new after entry `after` as list items, `entries` holding what came after it and —
/// before that — the entries of the step that was running then, whose line is drawn again.
pub(super) fn draw_since(
    c: &Console,
    entries: &[TapeEntry],
    after: u64,
    session: Option<&str>,
) -> Markup {
    let items = fold(entries);
    let new = items.iter().filter(|item| match item {
        Item::Entry(entry) => entry.id > after,
        Item::Step(step) => step
            .records
            .iter()
            .chain(&step.calls)
            .chain(&step.results)
            .any(|e| e.id > after),
    });
    html! { @for item in new { (item.draw(c, session)) } }
}

/// The id of the `loop.step.start` among `events` (the newest events up to some entry) whose
/// step had not ended there: the step running at that entry.
pub(super) fn running_step(events: &[TapeEntry]) -> Option<u64> {
    let last = events
        .iter()
        .rev()
        .find(|e| e.is_event(Event::LoopStepStart) || e.is_event(Event::LoopResult))?;
    last.is_event(Event::LoopStepStart).then_some(last.id)
}

impl Item<'_> {
    fn draw(&self, c: &Console, session: Option<&str>) -> Markup {
        match self {
            Item::Entry(entry) => entry_item(c, entry, session),
            Item::Step(step) => step.draw(),
        }
    }
}

impl Step<'_> {
    /// The record of `event` in this step.
    fn record(&self, event: Event) -> Option<&TapeEntry> {
        self.records.iter().copied().find(|e| e.is_event(event))
    }

    /// `step 2 · 1.2 s · 3,410 tok · bash ✓ fs.read ✗`; `running` while the step has not ended.
    fn summary(&self) -> String {
        let data = |event| self.record(event).map(|e| &e.payload["data"]);
        let number = [Event::LoopStepStart, Event::LoopStepFinish]
            .iter()
            .find_map(|e| data(*e).and_then(|d| d["step"].as_u64()));
        let mut parts = vec![match number {
            Some(n) => format!("step {n}"),
            None => "step".to_owned(),
        }];
        let start = self.record(Event::LoopStepStart);
        let end = self
            .record(Event::LoopStepFinish)
            .or(self.record(Event::LoopResult));
        match (start, end) {
            (Some(start), Some(end)) => parts.push(seconds(&start.date, &end.date)),
            (_, None) => parts.push("running".to_owned()),
            _ => {}
        }
        let tokens: u64 = self
            .records
            .iter()
            .filter(|e| e.is_event(Event::Run))
            .filter_map(|e| tokens(&e.payload["data"]["usage"]))
            .sum();
        if tokens > 0 {
            parts.push(format!("{} tok", crate::usage::thousands(tokens)));
        }
        let tools = self.tools();
        if !tools.is_empty() {
            parts.push(tools);
        }
        if self
            .records
            .iter()
            .any(|e| e.is_event(Event::Run) && e.payload["data"]["status"] == "error")
        {
            parts.push("model call failed".to_owned());
        }
        if let Some(error) = data(Event::LoopResult).map(|d| &d["error"])
            && !error.is_null()
        {
            parts.push("turn failed".to_owned());
        }
        parts.join(" · ")
    }

    /// The step's tool calls with how each went: `bash ✓ fs.read ✗` (`…` before its result).
    fn tools(&self) -> String {
        let statuses: Vec<&str> = self
            .results
            .iter()
            .flat_map(|r| r.payload["status"].as_array().into_iter().flatten())
            .map(|s| s.as_str().unwrap_or("ok"))
            .collect();
        let mut shown = Vec::new();
        for (i, call) in self.calls.iter().flat_map(|c| calls(c)).enumerate() {
            let mark = match statuses.get(i) {
                Some(&"ok") => "✓",
                Some(_) => "✗",
                None => "…",
            };
            shown.push(format!("{} {mark}", call_name(call)));
        }
        shown.join(" ")
    }

    fn draw(&self) -> Markup {
        let first = self.records[0];
        let time = page::when(&first.date);
        html! {
            li.work.step id={ "s" (first.id) } {
                details {
                    summary { (self.summary()) time { (time) } }
                    dl {
                        @for record in &self.records {
                            dt { (record.name().unwrap_or("event")) " " time { (page::when(&record.date)) } }
                            dd { (folded(&pretty_value(&record.payload["data"]))) }
                        }
                    }
                }
            }
        }
    }
}

/// `1.2 s` between two RFC 3339 dates.
fn seconds(from: &str, to: &str) -> String {
    let parse = chrono::DateTime::parse_from_rfc3339;
    match (parse(from), parse(to)) {
        (Ok(from), Ok(to)) => {
            let ms = (to - from).num_milliseconds().max(0);
            format!("{:.1} s", ms as f64 / 1000.0)
        }
        _ => "? s".to_owned(),
    }
}

/// The tokens of a `run` record's usage: its total, else input and output.
fn tokens(usage: &Value) -> Option<u64> {
    usage["total_tokens"].as_u64().or_else(|| {
        let (input, output) = (usage["input"].as_u64(), usage["output"].as_u64());
        input
            .or(output)
            .map(|_| input.unwrap_or(0) + output.unwrap_or(0))
    })
}

/// The calls of a `tool_call` entry.
fn calls(entry: &TapeEntry) -> impl Iterator<Item = &Value> {
    entry.payload["calls"].as_array().into_iter().flatten()
}

fn call_name(call: &Value) -> &str {
    call["function"]["name"]
        .as_str()
        .or(call["name"].as_str())
        .unwrap_or("tool")
}

pub(super) fn anchor_name(anchor: &TapeEntry) -> &str {
    anchor.payload["name"].as_str().unwrap_or("anchor")
}

/// Who wrote a message, when it was Bub and not a person (see the module docs): what the
/// runtime note says it is.
fn bubs_own(entry: &TapeEntry) -> Option<&'static str> {
    let meta = &entry.meta;
    match meta["origin"].as_str() {
        Some("followup") => return Some("the loop's next prompt"),
        Some("scheduled") => return Some("a scheduled run"),
        Some("subagent") => return Some("a subagent's task"),
        Some(_) => return Some("Bub"),
        None => {}
    }
    if meta["carried_over"] == true {
        return Some("carried over after a compaction");
    }
    let loop_prompt = meta.get("run_id").is_some() && meta.get("time").is_none();
    (entry.payload["role"] == "user" && loop_prompt).then_some("the loop's next prompt")
}

/// One entry as a list item; the files of `session`'s messages as links.
fn entry_item(c: &Console, entry: &TapeEntry, session: Option<&str>) -> Markup {
    let p = &entry.payload;
    let time = page::when(&entry.date);
    match entry.kind {
        Kind::Anchor => html! {
            li.anchor id={ "e" (entry.id) } {
                span.mark { "⚓ " (anchor_name(entry)) }
                @if let Some(summary) = p["state"]["summary"].as_str() {
                    div.summary { (markdown::render(summary, &c.redactor)) }
                }
                time { (time) }
            }
        },
        Kind::Message => {
            let role = p["role"].as_str().unwrap_or("message");
            let text = text_of(&p["content"]);
            if let Some(what) = bubs_own(entry) {
                return html! {
                    li.note id={ "e" (entry.id) } {
                        details {
                            summary { span.who { "Bub" } " · " (what) ": " span.args { (page::cut(&text, 120).0) } time { (time) } }
                            (markdown::render(&text, &c.redactor))
                        }
                    }
                };
            }
            html! {
                li.message.(role) id={ "e" (entry.id) } {
                    div.meta { span.who { (role) } time { (time) } }
                    (markdown::render(&text, &c.redactor))
                    @if let Some(session) = session {
                        @for name in saved(&text) {
                            a.file href={ "/file?id=" (encode(session)) "&name=" (encode(name)) } { "📎 " (name) }
                        }
                    }
                    @if let Some(images) = p["images"].as_array() {
                        div.meta { (images.len()) " image(s) sent to the model" }
                    }
                }
            }
        }
        Kind::ToolCall => html! {
            @for call in calls(entry) {
                @let args = call["function"]["arguments"].as_str().map(str::to_owned)
                    .unwrap_or_else(|| call["arguments"].to_string());
                li.work.call id={ "e" (entry.id) } {
                    details {
                        summary { "→ " (call_name(call)) " " span.args { (page::cut(&args, 120).0) } time { (time) } }
                        (folded(&pretty(&args)))
                    }
                }
            }
        },
        Kind::ToolResult => html! {
            @for (i, result) in p["results"].as_array().into_iter().flatten().enumerate() {
                @let text = result.as_str().map(str::to_owned).unwrap_or_else(|| result.to_string());
                @let status = p["status"][i].as_str().unwrap_or("ok");
                li.work.result id={ "e" (entry.id) } {
                    details {
                        summary { (if status == "ok" { "✓" } else { "✗" }) " result " span.args { (status) ", " (text.chars().count()) " characters" } time { (time) } }
                        (folded(&text))
                    }
                }
            }
        },
        Kind::Event => html! {
            li.work.event id={ "e" (entry.id) } {
                details {
                    summary { "• " (entry.name().unwrap_or("event")) time { (time) } }
                    (folded(&pretty_value(&p["data"])))
                }
            }
        },
        Kind::Error => html! {
            li.work.failure id={ "e" (entry.id) } {
                div.meta { span.who { "error" } time { (time) } }
                div.text.plain { (p["message"].as_str().map_or_else(|| p.to_string(), str::to_owned)) }
            }
        },
        Kind::System | Kind::Other(_) => html! {},
    }
}

/// A long text cut at [`CUT`], saying how much was left out.
fn folded(text: &str) -> Markup {
    let (shown, left) = page::cut(text, CUT);
    html! {
        pre { (shown) }
        @if left > 0 { p.hint { "… " (left) " more characters (tape.output has them all)" } }
    }
}

/// A message's text: a string, or the text parts of a list of parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// JSON arguments indented (as given when they are not JSON).
fn pretty(args: &str) -> String {
    serde_json::from_str::<Value>(args).map_or_else(|_| args.to_owned(), |v| pretty_value(&v))
}

fn pretty_value(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// The names of the files a message's prompt says were saved for it (`"saved":"chats/…/NAME"`).
fn saved(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices("\"saved\":\"")
        .filter_map(|(at, key)| {
            let rest = &text[at + key.len()..];
            let path = &rest[..rest.find('"')?];
            path.rsplit('/').next()
        })
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests;
