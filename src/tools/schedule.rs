//! Schedule tools: `schedule.add`, `schedule.list`, `schedule.remove`.
//!
//! They only edit the job store (`BUB_HOME/jobs.json`; any process may); the process owning the
//! scheduler fires the jobs. A session sees and removes only its own jobs.

use std::sync::Arc;

use chrono::Utc;
use schemars::JsonSchema;
use serde::Deserialize;

use super::registry::NoArgs;
use super::{Tool, ToolContext, ToolError};
use crate::scheduler::job::{self, Job, TriggerSpec, local_time};
use crate::scheduler::{CHANGED, JobStore};

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    /// What to do when the job fires
    message: String,
    /// Run once after this many seconds
    #[serde(default)]
    after_seconds: Option<f64>,
    /// Run every N seconds
    #[serde(default)]
    interval_seconds: Option<f64>,
    /// 5-field crontab expression
    #[serde(default)]
    cron: Option<String>,
    /// Run once at this ISO 8601 time
    #[serde(default)]
    at: Option<String>,
    /// IANA time zone for cron / at
    #[serde(default)]
    timezone: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct RemoveArgs {
    /// The job id
    job_id: String,
}

/// Runs a store operation off the async threads (file I/O under a lock).
async fn with_store<R: Send + 'static>(
    ctx: &ToolContext,
    f: impl FnOnce(Arc<dyn JobStore>) -> Result<R, ToolError> + Send + 'static,
) -> Result<R, ToolError> {
    let store = crate::scheduler::store::open(&ctx.settings().home);
    tokio::task::spawn_blocking(move || f(store))
        .await
        .map_err(|e| ToolError::new(format!("schedule task failed: {e}")))?
}

async fn add(args: AddArgs, ctx: ToolContext) -> Result<String, ToolError> {
    if args.message.trim().is_empty() {
        return Err(ToolError::invalid("message must not be empty"));
    }
    let now = Utc::now();
    let trigger = TriggerSpec {
        after_seconds: args.after_seconds,
        interval_seconds: args.interval_seconds,
        cron: args.cron,
        at: args.at,
        timezone: args.timezone,
    }
    .build(now)
    .map_err(ToolError::invalid)?;
    let job = Job {
        id: job::new_id(),
        session: ctx.session_id().to_owned(),
        message: args.message,
        workspace: ctx.workspace().to_path_buf(),
        next_run: trigger.next_after(now - chrono::Duration::milliseconds(1)),
        trigger,
        created: now,
        last_run: None,
        last_status: None,
        creator: Some(ctx.turn.authority.clone()),
    };
    let text = format!(
        "scheduled: {} next={}",
        job.id,
        job.next_run.map_or_else(|| "-".to_owned(), local_time)
    );
    with_store(&ctx, move |store| {
        store.change(|jobs| jobs.push(job)).map_err(ToolError::from)
    })
    .await?;
    CHANGED.notify_one();
    Ok(text)
}

async fn list(ctx: ToolContext) -> Result<String, ToolError> {
    let session = ctx.session_id().to_owned();
    let jobs = with_store(&ctx, |store| store.list().map_err(ToolError::from)).await?;
    let rows: Vec<String> = jobs
        .iter()
        .filter(|j| j.session == session)
        .map(|j| j.row(false))
        .collect();
    if rows.is_empty() {
        return Ok("(no scheduled jobs)".to_owned());
    }
    Ok(rows.join("\n"))
}

async fn remove(args: RemoveArgs, ctx: ToolContext) -> Result<String, ToolError> {
    let id = args.job_id.trim().to_owned();
    let session = ctx.session_id().to_owned();
    let removed = with_store(&ctx, {
        let id = id.clone();
        move |store| {
            store
                .change(|jobs| {
                    let before = jobs.len();
                    jobs.retain(|j| !(j.id == id && j.session == session));
                    jobs.len() < before
                })
                .map_err(ToolError::from)
        }
    })
    .await?;
    if !removed {
        // Jobs of other sessions are reported as missing too: their ids are not revealed.
        return Err(ToolError::new(format!("job not found: {id}")));
    }
    CHANGED.notify_one();
    Ok(format!("removed: {id}"))
}

/// The schedule tools.
pub(crate) fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "schedule.add",
            "Schedule a task for later or on a recurring basis",
            "Schedules `message` to run as a turn in this session. Give exactly one trigger: \
             `after_seconds` (once, that many seconds from now), `interval_seconds` (every N \
             seconds), `cron` (5 fields: minute hour day-of-month month day-of-week, e.g. \
             \"0 9 * * 1-5\") or `at` (an ISO time, e.g. 2026-12-24T18:00). `timezone` (IANA name, \
             e.g. Europe/Berlin) applies to cron and to an `at` without offset; default: the \
             machine's local zone. When it fires, you get the message as a scheduled run and your \
             answer goes to this chat. Use this instead of `sleep` for anything later than now.",
            add,
        ),
        Tool::new(
            "schedule.list",
            "List this session's scheduled jobs",
            "Lists the jobs of this session: id, next run, trigger, last status and message.",
            |_: NoArgs, ctx: ToolContext| list(ctx),
        ),
        Tool::new(
            "schedule.remove",
            "Remove one of this session's scheduled jobs",
            "Removes the job with `job_id` (see schedule.list). Only jobs of this session can be \
             removed.",
            remove,
        ),
    ]
}
