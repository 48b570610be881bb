//! The timeline's folding and notes on a turn as the agent's loop records it: a tool step and
//! an answer, with "Continue the task." between them.

use serde_json::json;

use super::*;

fn entry(id: u64, kind: Kind, payload: Value, meta: Value, ms: u64) -> TapeEntry {
    TapeEntry {
        id,
        kind,
        payload,
        meta,
        date: format!("2026-11-27T10:00:{:02}.{:03}Z", ms / 1000, ms % 1000),
    }
}

fn event(id: u64, event: Event, data: Value, ms: u64) -> TapeEntry {
    let payload = json!({"name": event.as_str(), "data": data});
    entry(id, Kind::Event, payload, json!({}), ms)
}

/// A turn of two steps: `bash` and `fs.read` (which failed), then the answer.
fn turn() -> Vec<TapeEntry> {
    let run = json!({"run_id": "r1", "role": "owner"});
    let first = json!({"run_id": "r1", "role": "owner", "time": "2026-11-27 11:00"});
    let usage = |n: u64| json!({"status": "ok", "usage": {"input": n - 10, "output": 10, "total_tokens": n}});
    let calls = json!({"calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}},
        {"id": "c2", "type": "function", "function": {"name": "fs.read", "arguments": "{}"}},
    ]});
    let user = |text: &str| json!({"role": "user", "content": text});
    vec![
        event(2, Event::LoopStepStart, json!({"step": 1, "model": "m"}), 0),
        entry(3, Kind::Message, user("list the files"), first, 10),
        event(4, Event::Run, usage(3000), 1000),
        entry(5, Kind::ToolCall, calls, run.clone(), 1000),
        entry(
            6,
            Kind::ToolResult,
            json!({"results": ["a b", "no"], "status": ["ok", "error"]}),
            run.clone(),
            1100,
        ),
        event(7, Event::LoopStepFinish, json!({"step": 1}), 1200),
        event(
            8,
            Event::LoopStepStart,
            json!({"step": 2, "model": "m"}),
            1200,
        ),
        entry(
            9,
            Kind::Message,
            user("Continue the task."),
            run.clone(),
            1210,
        ),
        event(10, Event::Run, usage(3410), 2400),
        entry(
            11,
            Kind::Message,
            json!({"role": "assistant", "content": "**Done.**"}),
            run,
            2400,
        ),
        event(12, Event::LoopStepFinish, json!({"step": 2}), 2400),
        event(
            13,
            Event::LoopResult,
            json!({"steps": 2, "error": null}),
            2400,
        ),
    ]
}

fn summaries(items: &[Item<'_>]) -> Vec<String> {
    items
        .iter()
        .map(|item| match item {
            Item::Step(step) => step.summary(),
            Item::Entry(e) => format!("#{}", e.id),
        })
        .collect()
}

#[test]
fn each_steps_bookkeeping_is_one_line_where_it_starts() {
    let entries = turn();
    let items = fold(&entries);
    assert_eq!(
        summaries(&items),
        [
            "step 1 · 1.2 s · 3,000 tok · bash ✓ fs.read ✗",
            "#3",
            "#5",
            "#6",
            "step 2 · 1.2 s · 3,410 tok",
            "#9",
            "#11",
        ]
    );
}

#[test]
fn a_running_step_says_so_and_a_page_starting_inside_a_step_still_folds() {
    let entries = turn();
    // The tool ran, its result is not there yet.
    let running = fold(&entries[..4]);
    assert_eq!(
        summaries(&running)[0],
        "step 1 · running · 3,000 tok · bash … fs.read …"
    );
    // A page that starts after the step's start.
    let inside = fold(&entries[8..]);
    assert_eq!(summaries(&inside), ["step 2 · 3,410 tok", "#11"]);
    assert_eq!(running_step(&entries[..4]), Some(2));
    assert_eq!(running_step(&entries[..8]), Some(8));
    assert_eq!(running_step(&entries), None, "the turn ended");
}

#[test]
fn bubs_own_prompts_are_told_by_the_tape_not_by_their_text() {
    let entries = turn();
    assert_eq!(bubs_own(&entries[1]), None, "the person's prompt");
    assert_eq!(
        bubs_own(&entries[7]),
        Some("the loop's next prompt"),
        "an older tape"
    );
    assert_eq!(bubs_own(&entries[9]), None, "the answer");
    let marked = |origin: &str| {
        let meta = json!({"run_id": "r", "time": "t", "origin": origin});
        entry(
            1,
            Kind::Message,
            json!({"role": "user", "content": "hi"}),
            meta,
            0,
        )
    };
    assert_eq!(
        bubs_own(&marked("followup")),
        Some("the loop's next prompt")
    );
    assert_eq!(bubs_own(&marked("scheduled")), Some("a scheduled run"));
    assert_eq!(bubs_own(&marked("subagent")), Some("a subagent's task"));
    // The same words from a person are theirs.
    let said = json!({"run_id": "r", "time": "t"});
    let person = entry(
        1,
        Kind::Message,
        json!({"role": "user", "content": "Continue the task."}),
        said,
        0,
    );
    assert_eq!(bubs_own(&person), None);
    let carried = json!({"carried_over": true, "run_id": "r"});
    let carried = entry(
        1,
        Kind::Message,
        json!({"role": "assistant", "content": "x"}),
        carried,
        0,
    );
    assert_eq!(bubs_own(&carried), Some("carried over after a compaction"));
}
