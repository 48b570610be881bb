//! The stagnation guard (the tool observation contract of Bub's README): within a turn, a tool
//! called again with the same arguments (compared after parsing, key order ignored) that
//! returns the same result again is `stagnant`. The model is then shown a short note instead
//! of the same output once more (no tokens spent on what it has already seen), telling it to
//! stop repeating the call; after [`STAGNANT_LIMIT`] stagnant calls the turn ends, and the chat
//! is told what was repeated.
//!
//! Invariants: a first call, or a call whose result differs from the one before it with the
//! same signature, is never stagnant; the map holds one entry per distinct call of the turn, so
//! it is bounded by the turn's steps.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

/// Stagnant calls after which the turn ends.
pub(crate) const STAGNANT_LIMIT: u32 = 3;

/// What a tool call's result was, for the model and the tape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    Error,
    /// The same call returned the same result as the last time.
    Stagnant,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Stagnant => "stagnant",
        }
    }
}

/// One call's observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Observation {
    pub status: Status,
    /// How many times in a row this call returned this result before.
    pub repeat: u32,
}

/// A turn's record of its tool calls.
#[derive(Default)]
pub(crate) struct Guard {
    /// Per call signature: the last result's hash and how often it came in a row before.
    seen: HashMap<u64, (u64, u32)>,
    stagnant: u32,
    /// The tool of the last stagnant call (for the chat's message).
    last: Option<String>,
}

impl Guard {
    /// Observes a finished call of `tool` with `arguments` (the model's JSON text).
    pub(crate) fn observe(
        &mut self,
        tool: &str,
        arguments: &str,
        result: &Result<String, String>,
    ) -> Observation {
        let result_hash = hash_of(&result);
        let (last, repeat) = self
            .seen
            .entry(signature(tool, arguments))
            .or_insert((!result_hash, 0));
        if *last == result_hash {
            *repeat += 1;
            self.stagnant += 1;
            self.last = Some(tool.to_owned());
            return Observation {
                status: Status::Stagnant,
                repeat: *repeat,
            };
        }
        (*last, *repeat) = (result_hash, 0);
        let status = if result.is_ok() {
            Status::Ok
        } else {
            Status::Error
        };
        Observation { status, repeat: 0 }
    }

    /// The turn should end: the message for the chat, once [`STAGNANT_LIMIT`] calls stagnated.
    pub(crate) fn exhausted(&self) -> Option<String> {
        let tool = self.last.as_deref()?;
        (self.stagnant >= STAGNANT_LIMIT).then(|| {
            format!(
                "Stopped: the agent kept repeating `{tool}` with the same arguments and got the \
                 same result each time ({} repeated calls).",
                self.stagnant
            )
        })
    }
}

/// What the model is shown in place of a stagnant call's result.
pub(crate) fn note(tool: &str, observation: Observation) -> String {
    format!(
        "[status: stagnant, repeat: {}] `{tool}` returned exactly what it returned for the same \
         arguments before (not shown again). Do not call it again: answer with what you have, or \
         say what blocks you.",
        observation.repeat
    )
}

/// The call's identity: the tool and its arguments, parsed (key order ignored) when they are
/// JSON, else as written.
fn signature(tool: &str, arguments: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    tool.hash(&mut hasher);
    match serde_json::from_str::<Value>(arguments) {
        Ok(value) => hash_value(&value, &mut hasher),
        Err(_) => arguments.hash(&mut hasher),
    }
    hasher.finish()
}

fn hash_value(value: &Value, hasher: &mut DefaultHasher) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by_key(|(k, _)| *k);
            for (k, v) in entries {
                k.hash(hasher);
                hash_value(v, hasher);
            }
            b'}'.hash(hasher);
        }
        Value::Array(items) => {
            items.iter().for_each(|v| hash_value(v, hasher));
            b']'.hash(hasher);
        }
        scalar => scalar.to_string().hash(hasher),
    }
}

fn hash_of(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Result<String, String> {
        Ok(text.to_owned())
    }

    #[test]
    fn the_same_call_with_the_same_result_is_stagnant_and_three_end_the_turn() {
        let mut guard = Guard::default();
        let first = guard.observe("fs.read", r#"{"path":"a","limit":5}"#, &ok("x"));
        assert_eq!(first.status, Status::Ok);
        // Key order and spacing do not make another call.
        let again = guard.observe("fs.read", r#"{ "limit": 5, "path": "a" }"#, &ok("x"));
        assert_eq!(
            again,
            Observation {
                status: Status::Stagnant,
                repeat: 1
            }
        );
        assert!(guard.exhausted().is_none());
        guard.observe("fs.read", r#"{"path":"a","limit":5}"#, &ok("x"));
        let third = guard.observe("fs.read", r#"{"path":"a","limit":5}"#, &ok("x"));
        assert_eq!(third.repeat, 3);
        let message = guard
            .exhausted()
            .expect("three stagnant calls end the turn");
        assert!(message.contains("`fs.read`"), "{message}");
        assert!(note("fs.read", third).starts_with("[status: stagnant, repeat: 3]"));
    }

    #[test]
    fn new_results_other_arguments_and_errors_are_not_stagnant() {
        let mut guard = Guard::default();
        assert_eq!(
            guard.observe("tape.info", "{}", &ok("3 entries")).status,
            Status::Ok
        );
        // The result changed: progress, not stagnation.
        assert_eq!(
            guard.observe("tape.info", "{}", &ok("5 entries")).status,
            Status::Ok
        );
        assert_eq!(
            guard
                .observe("fs.read", r#"{"path":"b"}"#, &ok("5 entries"))
                .status,
            Status::Ok,
            "another tool, the same text"
        );
        let failed = Err("no such file".to_owned());
        assert_eq!(
            guard.observe("fs.read", r#"{"path":"c"}"#, &failed).status,
            Status::Error
        );
        // The same failure again is stagnant too: the model learns nothing new.
        assert_eq!(
            guard.observe("fs.read", r#"{"path":"c"}"#, &failed).status,
            Status::Stagnant
        );
        // An error and a success with the same text are different results.
        assert_eq!(
            guard
                .observe("fs.read", r#"{"path":"c"}"#, &ok("no such file"))
                .status,
            Status::Ok
        );
        assert!(guard.exhausted().is_none());
    }
}
