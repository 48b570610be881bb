//! Schedule tools: `schedule.add`, `schedule.list`, `schedule.remove`.
//!
//! They only edit the job store (`BUB_HOME/jobs.json`; any process may); the process owning the
//! scheduler fires the jobs. A session sees and removes only its own jobs; a subagent's turn
//! works on its parent chat's ([`ToolContext::chat_session`]): a job it adds runs there and
//! counts against that chat's caps.
//!
//! They apply the turn's [`JobLimits`](crate::access::policy::JobLimits) (by role: jobs per
//! session, message size, shortest interval, removing only one's own jobs) and the bound on all
//! jobs of a `BUB_HOME` ([`MAX_JOBS`]), counted under the store's lock: concurrent adds cannot
//! pass a limit together. A limit that stops a call is a refusal (`tool.refused` on the tape).

use chrono::Utc;
use schemars::JsonSchema;
use serde::Deserialize;

use super::registry::NoArgs;
use super::{Tool, ToolContext, ToolError};
use crate::scheduler::CHANGED;
use crate::scheduler::job::{self, Job, MAX_JOBS, TriggerSpec, local_time};

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    /// what to do then
    message: String,
    /// once, after N seconds
    after_seconds: Option<f64>,
    /// every N seconds
    interval_seconds: Option<f64>,
    /// 5-field crontab expression
    cron: Option<String>,
    /// once, at this ISO 8601 time
    at: Option<String>,
    /// IANA time zone for cron / at
    timezone: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct RemoveArgs {
    /// The job id
    job_id: String,
}

async fn add(args: AddArgs, ctx: ToolContext) -> Result<String, ToolError> {
    if args.message.trim().is_empty() {
        return Err(ToolError::invalid("message must not be empty"));
    }
    let (role, limits) = (ctx.turn.policy.role, ctx.turn.policy.jobs());
    if args.message.len() > limits.message_bytes {
        return Err(ToolError::Refused(format!(
            "the job's message is {} bytes; {role}s may schedule messages of at most {} bytes",
            args.message.len(),
            limits.message_bytes
        )));
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
    if let Some(gap) = trigger.shortest_gap(now)
        && gap < limits.min_interval_seconds
    {
        return Err(ToolError::Refused(format!(
            "this schedule runs {gap} s apart; {role}s may schedule runs at most every {} s ({})",
            limits.min_interval_seconds,
            crate::time::human_duration(std::time::Duration::from_secs(
                limits.min_interval_seconds
            ))
        )));
    }
    let job = Job {
        id: job::new_id(),
        session: ctx.chat_session().to_string(),
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
    ctx.process
        .jobs()
        .change(move |jobs| {
            if jobs.len() >= MAX_JOBS {
                return Err(ToolError::new(format!(
                    "there are already {MAX_JOBS} scheduled jobs (the limit for one \
                         BUB_HOME); remove some first"
                )));
            }
            let same = |j: &&Job| j.session == job.session && j.recorded_authority().role == role;
            if jobs.iter().filter(same).count() >= limits.per_session {
                return Err(ToolError::Refused(format!(
                    "this chat already has {} scheduled jobs created by {role}s (the limit \
                         for {role}s); remove one first (schedule.list, schedule.remove)",
                    limits.per_session
                )));
            }
            jobs.push(job);
            Ok(())
        })
        .await??;
    CHANGED.notify_one();
    Ok(text)
}

async fn list(ctx: ToolContext) -> Result<String, ToolError> {
    let session = ctx.chat_session().to_string();
    let jobs = ctx.process.jobs().list().await?;
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

/// What `schedule.remove` found.
enum Removal {
    Removed,
    /// No job of this session has the id.
    NotFound,
    /// The job is the session's, but someone else created it and the turn may remove only its
    /// senders' own jobs.
    NotTheirs,
}

async fn remove(args: RemoveArgs, ctx: ToolContext) -> Result<String, ToolError> {
    let id = args.job_id.trim().to_owned();
    let session = ctx.chat_session().to_string();
    let own_only = ctx.turn.policy.jobs().own_jobs_only;
    let who = ctx.turn.authority.clone();
    let wanted = id.clone();
    let removal = ctx
        .process
        .jobs()
        .change(move |jobs| {
            let Some(at) = jobs
                .iter()
                .position(|j| j.id == wanted && j.session == session)
            else {
                return Removal::NotFound;
            };
            if own_only && !jobs[at].created_by(&who) {
                return Removal::NotTheirs;
            }
            jobs.remove(at);
            Removal::Removed
        })
        .await?;
    match removal {
        Removal::Removed => {
            CHANGED.notify_one();
            Ok(format!("removed: {id}"))
        }
        // Jobs of other sessions are reported as missing too: their ids are not revealed.
        Removal::NotFound => Err(ToolError::new(format!("job not found: {id}"))),
        // The job is in this chat's list, so "not found" would be a lie: say why.
        Removal::NotTheirs => Err(ToolError::Refused(format!(
            "job {id} was created by someone else; {}s may remove only the jobs they created",
            ctx.turn.policy.role
        ))),
    }
}

/// The schedule tools.
pub(crate) fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "schedule.add",
            "Schedule a task (once or recurring)",
            "Schedules `message` to run as a turn in this session. Give exactly one trigger: \
             `after_seconds` (once, that many seconds from now), `interval_seconds` (every N \
             seconds), `cron` (5 fields: minute hour day-of-month month day-of-week, e.g. \
             \"0 9 * * 1-5\") or `at` (an ISO time, e.g. 2026-12-24T18:00). `timezone` (IANA name, \
             e.g. Europe/Berlin) applies to cron and to an `at` without offset; default: the \
             machine's local zone. When it fires, you get the message as a scheduled run and your \
             answer goes to this chat. Use this instead of `sleep` for anything later than now. \
             A chat holds a limited number of jobs (guests: 5, at most every 5 minutes).",
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
             removed; guests remove only the jobs they created.",
            remove,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::access::{Authority, Principal, Role, TurnOrigin};
    use crate::config::Settings;
    use crate::tape::Event;
    use crate::tools::{ProcessCtx, SessionCtx, builtin_registry};

    /// Telegram user `id` with `role`.
    fn user(role: Role, ids: &[&str]) -> Authority {
        Authority {
            role,
            senders: ids
                .iter()
                .map(|id| Principal {
                    channel: "telegram".into(),
                    id: (*id).into(),
                    name: None,
                })
                .collect(),
        }
    }

    /// One process on a temporary home; contexts of its turns.
    struct Home {
        _dir: tempfile::TempDir,
        settings: Settings,
        process: Arc<ProcessCtx>,
    }

    impl Home {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let settings = Settings::with_defaults(dir.path().join("home"), dir.path().into());
            let shared = Arc::new(settings.clone());
            let process = Arc::new(ProcessCtx::new(shared, builtin_registry(&[])));
            Self {
                _dir: dir,
                settings,
                process,
            }
        }

        fn turn(&self, session: &str, who: Authority, origin: TurnOrigin) -> ToolContext {
            let workspace = &self.settings.workspace;
            let session = SessionCtx::open(&self.process, workspace, &session.into()).unwrap();
            let session = Arc::new(session);
            let output = crate::tools::TurnOutput::default();
            ToolContext::with_live(
                self.process.clone(),
                session,
                who,
                origin,
                output,
                None,
                None,
            )
        }

        async fn jobs(&self) -> Vec<Job> {
            let store = crate::scheduler::store::open(&self.settings.home, None);
            store.list().await.unwrap()
        }
    }

    async fn call(ctx: &ToolContext, tool: &str, args: Value) -> Result<String, ToolError> {
        ctx.registry().execute(tool, args, ctx.clone()).await
    }

    async fn refusals(ctx: &ToolContext) -> usize {
        let entries = ctx.tape().entries().await.unwrap();
        entries
            .iter()
            .filter(|e| e.is_event(Event::ToolRefused))
            .count()
    }

    fn id_of(added: &str) -> String {
        added.split_whitespace().nth(1).unwrap().to_owned()
    }

    #[tokio::test]
    async fn guests_get_fewer_jobs_shorter_messages_and_no_frequent_runs() {
        let home = Home::new();
        let guest = home.turn("telegram:5", user(Role::Guest, &["50"]), TurnOrigin::Asked);
        let add = |args: Value| call(&guest, "schedule.add", args);

        let long = "x".repeat(GUEST_JOBS_BYTES + 1);
        let err = add(json!({"message": long, "cron": "0 9 * * *"})).await;
        assert_eq!(
            err.unwrap_err(),
            ToolError::Refused(
                "the job's message is 1025 bytes; guests may schedule messages of at most 1024 \
                 bytes"
                    .into()
            )
        );
        for frequent in [
            json!({"message": "m", "interval_seconds": 2}),
            json!({"message": "m", "interval_seconds": 299}),
            json!({"message": "m", "cron": "* * * * *"}),
            // Twice within a minute, once a day: refused too.
            json!({"message": "m", "cron": "0,1 9 * * *", "timezone": "UTC"}),
        ] {
            let err = add(frequent.clone()).await.unwrap_err();
            assert!(matches!(err, ToolError::Refused(_)), "{frequent}: {err:?}");
            assert!(
                err.message()
                    .contains("guests may schedule runs at most every 300 s (5m 0s)"),
                "{err}"
            );
        }
        assert_eq!(refusals(&guest).await, 5, "each refusal is on the tape");
        assert!(home.jobs().await.is_empty());

        // Five jobs at the limits are fine; the sixth is refused and nothing is stored.
        let fine = [
            json!({"message": "x".repeat(GUEST_JOBS_BYTES), "interval_seconds": 300}),
            json!({"message": "m", "cron": "*/5 * * * *"}),
            json!({"message": "m", "cron": "0 9 * * *"}),
            json!({"message": "m", "after_seconds": 1}),
            json!({"message": "m", "at": "2099-01-01T00:00:00Z"}),
        ];
        for args in fine {
            add(args).await.unwrap();
        }
        let sixth = add(json!({"message": "m", "cron": "0 10 * * *"})).await;
        assert_eq!(
            sixth.unwrap_err(),
            ToolError::Refused(
                "this chat already has 5 scheduled jobs created by guests (the limit for \
                 guests); remove one first (schedule.list, schedule.remove)"
                    .into()
            )
        );
        assert_eq!(home.jobs().await.len(), 5);
        // Another guest in the same chat shares the guests' five; the owner has their own.
        let other = home.turn("telegram:5", user(Role::Guest, &["51"]), TurnOrigin::Asked);
        assert!(
            call(
                &other,
                "schedule.add",
                json!({"message": "m", "cron": "0 9 * * *"})
            )
            .await
            .is_err()
        );
        let owner = home.turn("telegram:5", user(Role::Owner, &["42"]), TurnOrigin::Asked);
        let every_second = json!({"message": "m", "interval_seconds": 1});
        call(&owner, "schedule.add", every_second).await.unwrap();
        // Another chat has its own five.
        let elsewhere = home.turn("telegram:6", user(Role::Guest, &["50"]), TurnOrigin::Asked);
        call(
            &elsewhere,
            "schedule.add",
            json!({"message": "m", "cron": "0 9 * * *"}),
        )
        .await
        .unwrap();
        assert_eq!(home.jobs().await.len(), 7);
    }

    const GUEST_JOBS_BYTES: usize = crate::access::policy::GUEST_JOBS.message_bytes;

    #[tokio::test]
    async fn owners_keep_fifty_jobs_per_chat_and_a_home_keeps_a_thousand() {
        let home = Home::new();
        let owner = home.turn("cli", Authority::terminal(), TurnOrigin::Asked);
        let store = crate::scheduler::store::open(&home.settings.home, None);
        let mut first = None;
        for _ in 0..50 {
            let added = call(
                &owner,
                "schedule.add",
                json!({"message": "m", "cron": "0 9 * * *"}),
            );
            first.get_or_insert(id_of(&added.await.unwrap()));
        }
        let err = call(
            &owner,
            "schedule.add",
            json!({"message": "m", "cron": "0 9 * * *"}),
        )
        .await
        .unwrap_err();
        assert!(
            err.message()
                .starts_with("this chat already has 50 scheduled jobs created by owners"),
            "{err}"
        );
        // With room in the chat again, jobs of other sessions fill the home up to its limit.
        let removed = call(&owner, "schedule.remove", json!({"job_id": first.unwrap()}));
        removed.await.unwrap();
        let template = home.jobs().await.remove(0);
        store
            .change(move |jobs| {
                for n in jobs.len()..MAX_JOBS {
                    let mut job = template.clone();
                    job.id = format!("fill{n:04}");
                    job.session = format!("telegram:{n}");
                    jobs.push(job);
                }
            })
            .await
            .unwrap();
        let err = call(
            &owner,
            "schedule.add",
            json!({"message": "m", "cron": "0 9 * * *"}),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err,
            ToolError::Failed(
                "there are already 1000 scheduled jobs (the limit for one BUB_HOME); remove \
                 some first"
                    .into()
            )
        );
        assert_eq!(home.jobs().await.len(), MAX_JOBS);
    }

    #[tokio::test]
    async fn guests_remove_only_the_jobs_they_created() {
        let home = Home::new();
        let chat = "telegram:-100";
        let owner = home.turn(chat, user(Role::Owner, &["42"]), TurnOrigin::Asked);
        let ann = home.turn(chat, user(Role::Guest, &["50"]), TurnOrigin::Asked);
        let bob = home.turn(chat, user(Role::Guest, &["51"]), TurnOrigin::Asked);
        let both = home.turn(chat, user(Role::Guest, &["50", "51"]), TurnOrigin::Asked);
        let add = async |ctx: &ToolContext| {
            let args = json!({"message": "m", "cron": "0 9 * * *"});
            id_of(&call(ctx, "schedule.add", args).await.unwrap())
        };
        let (owners, anns, bobs) = (add(&owner).await, add(&ann).await, add(&bob).await);
        let remove = async |ctx: &ToolContext, id: &str| {
            call(ctx, "schedule.remove", json!({"job_id": id})).await
        };

        let err = remove(&ann, &owners).await.unwrap_err();
        assert_eq!(
            err,
            ToolError::Refused(format!(
                "job {owners} was created by someone else; guests may remove only the jobs \
                 they created"
            ))
        );
        assert!(remove(&ann, &bobs).await.is_err());
        assert!(
            remove(&both, &anns).await.is_err(),
            "a batch has no more rights than each of its senders"
        );
        assert_eq!(refusals(&ann).await, 3);
        assert_eq!(home.jobs().await.len(), 3);
        let elsewhere = home.turn("telegram:7", user(Role::Owner, &["42"]), TurnOrigin::Asked);
        assert_eq!(
            remove(&elsewhere, &anns).await.unwrap_err(),
            ToolError::Failed(format!("job not found: {anns}"))
        );

        assert_eq!(
            remove(&ann, &anns).await.unwrap(),
            format!("removed: {anns}")
        );
        assert_eq!(
            remove(&owner, &bobs).await.unwrap(),
            format!("removed: {bobs}")
        );
        let left: Vec<String> = home.jobs().await.into_iter().map(|j| j.id).collect();
        assert_eq!(left, [owners]);
    }

    #[tokio::test]
    async fn the_scheduled_run_of_a_guest_s_job_cannot_schedule_jobs() {
        let home = Home::new();
        let who = user(Role::Guest, &["50"]);
        let run = home.turn("telegram:5", who.clone(), TurnOrigin::Scheduled);
        let err = call(
            &run,
            "schedule.add",
            json!({"message": "again", "after_seconds": 1}),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ToolError::Refused(_)), "{err:?}");
        assert!(
            err.message().contains("scheduled run of a guest's job"),
            "{err}"
        );
        assert_eq!(refusals(&run).await, 1);
        assert!(home.jobs().await.is_empty());
        assert_eq!(
            call(&run, "schedule.list", json!({})).await.unwrap(),
            "(no scheduled jobs)"
        );
        // An owner's job keeps today's rules.
        let owner = home.turn(
            "telegram:5",
            user(Role::Owner, &["42"]),
            TurnOrigin::Scheduled,
        );
        call(
            &owner,
            "schedule.add",
            json!({"message": "again", "after_seconds": 1}),
        )
        .await
        .unwrap();
        let jobs = home.jobs().await;
        assert_eq!(jobs[0].creator.as_ref().unwrap().senders[0].id, "42");
        assert!(
            jobs[0].row(true).contains(" by=owner (telegram:42) "),
            "{}",
            jobs[0].row(true)
        );
    }
}
