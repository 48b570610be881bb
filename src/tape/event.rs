//! The events Bub records on a tape: `event` entries `{"name": …, "data": …}`, the name being
//! [`Event::as_str`]. Every writer names its event with this type; a reader matches events by
//! [`TapeEntry::is_event`](super::TapeEntry::is_event), so an event another writer named
//! otherwise is read and passed over.

/// The name of an `event` entry, with the shape of its `data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// `run`: one model call, `{status, usage?, provider?, model?, ...}`.
    Run,
    /// `command`: a comma command, `{origin, kind, raw, name, status, elapsed_ms, output}`.
    Command,
    /// `handoff`: written with each anchor, `{name, state}`.
    Handoff,
    /// `loop.step.start`: a step of the model loop begins, `{step, model}`.
    LoopStepStart,
    /// `loop.step.finish`: `{step, visible_text, followup, exit_requested}`.
    LoopStepFinish,
    /// `loop.step.error`: the step failed, `{step, error}`.
    LoopStepError,
    /// `loop.step.empty`: the model answered with nothing, `{step}`.
    LoopStepEmpty,
    /// `loop.max_steps`: the loop stopped at its limit, `{max_steps}`.
    LoopMaxSteps,
    /// `loop.stagnant`: the loop stopped: tool calls kept returning the same, `{step}`.
    LoopStagnant,
    /// `loop.result`: the turn's loop ended, `{steps, followups, exit_requested, error}`.
    LoopResult,
    /// `context.compacted`: the context was summarised into a new anchor,
    /// `{reason, summary_by, tokens_before, carried, ms}`.
    ContextCompacted,
    /// `model.fallback`: a call went on to the next model, `{from, reason, error, to}`.
    ModelFallback,
    /// `budget.exceeded`: a call was not made, `{budget, limit, spent, for, resets_in_seconds}`.
    BudgetExceeded,
    /// `memory.remembered`: facts kept after a turn, `{entries}`.
    MemoryRemembered,
    /// `memory.lesson`: a lesson kept from a failed tool call, `{lesson}`.
    MemoryLesson,
    /// `skill.learn`: what learning after a turn did, `{outcome, ...}`.
    SkillLearn,
    /// `media.images_refused`: the model did not take images, `{status, error}`.
    ImagesRefused,
    /// `tool.refused`: the turn's policy refused a call, `{tool, role, reason}`.
    ToolRefused,
    /// `schedule.run`: how a scheduled job's run went, `{job, due, ...}`.
    ScheduleRun,
    /// `turn.interrupted`: the terminal's turn was interrupted, `{by}`.
    TurnInterrupted,
    /// `turn.cancelled`: `,stop` ended a chat's turn, `{by, after_ms, what}`.
    TurnCancelled,
    /// `subagent.start`: a subagent took a task, `{id, session, task, tools}` (its turn is on
    /// the tape of `session`).
    SubagentStart,
    /// `subagent.done`: a subagent finished, `{id, session, steps, error}`.
    SubagentDone,
    /// `messages.left_out`: messages of a batch too large for one model request,
    /// `{count, messages}`; searchable like messages.
    MessagesLeftOut,
}

impl Event {
    /// The name written on the tape.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Command => "command",
            Self::Handoff => "handoff",
            Self::LoopStepStart => "loop.step.start",
            Self::LoopStepFinish => "loop.step.finish",
            Self::LoopStepError => "loop.step.error",
            Self::LoopStepEmpty => "loop.step.empty",
            Self::LoopMaxSteps => "loop.max_steps",
            Self::LoopStagnant => "loop.stagnant",
            Self::LoopResult => "loop.result",
            Self::ContextCompacted => "context.compacted",
            Self::ModelFallback => "model.fallback",
            Self::BudgetExceeded => "budget.exceeded",
            Self::MemoryRemembered => "memory.remembered",
            Self::MemoryLesson => "memory.lesson",
            Self::SkillLearn => "skill.learn",
            Self::ImagesRefused => "media.images_refused",
            Self::ToolRefused => "tool.refused",
            Self::ScheduleRun => "schedule.run",
            Self::TurnInterrupted => "turn.interrupted",
            Self::TurnCancelled => "turn.cancelled",
            Self::SubagentStart => "subagent.start",
            Self::SubagentDone => "subagent.done",
            Self::MessagesLeftOut => "messages.left_out",
        }
    }
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
