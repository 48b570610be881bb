//! A step's tool calls: recorded before they run, run one by one (the live answer's status
//! line names the one running), observed by the stagnation guard and the turn's observer,
//! their results recorded after; a failure and the success that follows it become a lesson.

use std::time::Instant;

use serde_json::{Value, json};

use super::ModelLoop;
use crate::agent::learn::ToolStep;
use crate::agent::stagnation;
use crate::llm::{ChatResponse, ToolCall};
use crate::tape::{Event, Kind};
use crate::tools::ToolEvent;

impl ModelLoop<'_> {
    /// Records the calls, runs them one by one, records their results.
    pub(super) async fn run_tools(&mut self, response: &ChatResponse, run: &Value) {
        let calls: Vec<Value> = response
            .tool_calls
            .iter()
            .map(ToolCall::to_record)
            .collect();
        self.append(Kind::ToolCall, json!({"calls": calls}), run)
            .await;
        let mut results = Vec::with_capacity(response.tool_calls.len());
        let mut statuses = Vec::with_capacity(response.tool_calls.len());
        let cut = response.finish_reason.as_deref() == Some(super::CUT);
        for call in &response.tool_calls {
            self.show_status(Some(running(call)));
            let registry = self.ctx.registry();
            let found = registry.get(&call.name);
            let tool = found.as_ref().map_or(&call.name, |t| &t.name);
            self.observe(ToolEvent::Started {
                tool,
                arguments: &call.arguments,
            });
            let started = Instant::now();
            let result = self.run_tool(call, cut).await;
            self.observe(ToolEvent::Finished {
                tool,
                elapsed: started.elapsed(),
                result: result.as_deref().map_err(String::as_str),
            });
            let seen = self.guard.observe(tool, &call.arguments, &result);
            statuses.push(seen.status.as_str());
            let step = ToolStep::new(tool, &call.arguments, &result);
            self.learn(&step.tool, call, &result).await;
            self.trail.push(step);
            let shown = match seen.status {
                stagnation::Status::Stagnant => stagnation::note(tool, seen),
                _ => result.unwrap_or_else(|e| e),
            };
            results.push(Value::String(shown));
        }
        self.show_status(None);
        let payload = json!({"results": results, "status": statuses});
        self.append(Kind::ToolResult, payload, run).await;
    }

    /// Tells the turn's observer (if any) about a tool call, with its arguments redacted (they
    /// come from the model; outputs and errors passed the registry's redactor already).
    fn observe(&self, event: ToolEvent<'_>) {
        let Some(observer) = &self.ctx.turn.observer else {
            return;
        };
        match event {
            // The model's arguments are the one part no tool has redacted.
            ToolEvent::Started { tool, arguments } => observer(&ToolEvent::Started {
                tool,
                arguments: &self.ctx.process.redactor.redact(arguments),
            }),
            // Outputs and errors are what the registry returned: already redacted.
            finished => observer(&finished),
        }
    }

    /// Shows what runs under the live answer (`None`: nothing), and only the earlier steps'
    /// text above it (this step's text asked for tools; it is not part of the answer).
    fn show_status(&self, status: Option<String>) {
        if let Some(live) = &self.ctx.turn.live {
            live.send_modify(|l| {
                l.text.clone_from(&self.shown);
                l.status = status;
            });
        }
    }

    /// A lesson from this turn's tool calls: when a call fails and a later call of the same
    /// tool succeeds, what failed and what worked is kept in the chat's memory.
    async fn learn(&mut self, tool: &str, call: &ToolCall, result: &Result<String, String>) {
        let error = match result {
            Err(error) => return self.failures.push((tool.to_owned(), error.clone())),
            Ok(_) => match self.failures.iter().position(|(name, _)| name == tool) {
                Some(at) => self.failures.remove(at).1,
                None => return,
            },
        };
        if !self.ctx.process.memory_enabled {
            return;
        }
        let lesson = crate::memory::lesson(tool, &error, &call.arguments);
        let memory = self.ctx.process.memory();
        let scope = crate::memory::Scope::Chat(self.ctx.session_id().to_owned());
        let by = crate::memory::Author::of(&self.ctx.turn.authority);
        match memory.remember(&scope, &lesson, &by).await {
            Ok(lesson) => {
                self.event(Event::MemoryLesson, json!({"lesson": lesson}))
                    .await
            }
            Err(e) => tracing::error!(error = %format!("{e:#}"), "memory.lesson.error"),
        }
    }

    /// The call's output, or the error text the model is told. `cut`: the reply stopped at
    /// the output limit, which is why arguments may end half-way.
    async fn run_tool(&self, call: &ToolCall, cut: bool) -> Result<String, String> {
        let registry = self.ctx.registry();
        let Some(tool) = registry.get(&call.name) else {
            let known: Vec<String> = registry
                .tools()
                .iter()
                .filter(|t| t.offered)
                .map(|t| t.model_name())
                .collect();
            return Err(format!(
                "error: unknown tool '{}'; available tools: {}",
                call.name,
                known.join(", ")
            ));
        };
        let args = if call.arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str::<Value>(&call.arguments) {
                Ok(v) => v,
                Err(_) if cut => {
                    return Err(format!(
                        "error: the arguments of tool '{}' were cut off at the output limit of {} \
                         tokens (BUB_MAX_TOKENS); send less in one call (write a long file in parts)",
                        call.name, self.max_tokens
                    ));
                }
                Err(e) => {
                    return Err(format!(
                        "error: arguments of tool '{}' are not valid JSON ({e}); send a JSON object",
                        call.name
                    ));
                }
            }
        };
        let name = tool.name.clone();
        registry
            .execute(&name, args, self.ctx.clone())
            .await
            .map_err(|e| format!("error: tool '{name}' failed: {e}"))
    }
}

/// The status line of a running tool call: ``running `cargo test`…`` for a shell command (its
/// first line, cut), ``running `fs.read`…`` for any other tool.
fn running(call: &ToolCall) -> String {
    let command = serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .and_then(|args| args["cmd"].as_str().map(str::to_owned))
        .and_then(|cmd| {
            cmd.lines()
                .next()
                .map(|l| crate::channels::text::cut(l.trim(), 60))
        })
        .filter(|cmd| !cmd.is_empty());
    let what = command.unwrap_or_else(|| call.name.replace('_', "."));
    format!("running `{what}`…")
}
