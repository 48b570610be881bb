//! The owner loop with a recording job runner: firing jobs other processes add, one owner per
//! BUB_HOME (the standby takes over), no double firing across a restart, valid jobs firing next
//! to bad ones.
//!
//! These run on tokio's paused clock: the schedulers read the time from one `TokioClock`, so
//! when no task can run the runtime jumps to the next timer and the jobs due by then are due.
//! Waiting costs no real time. Waits end on an event (a run recorded) or a condition (the owner
//! lock is held, the store shows the run finished), each bounded in virtual and in real time.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use bub::scheduler::job::{Job, RunStatus};
use bub::scheduler::{Clock, JobRunner, JobStore, Scheduler, TokioClock, store};

use super::{every, hand_job, job, once, write_jobs};

/// How much virtual time one wait may take before the test fails.
const LIMIT: Duration = Duration::from_secs(60);
/// How much real time one wait may take before the test fails.
const REAL_LIMIT: Duration = Duration::from_secs(30);

/// Runs `wait` to its end, or fails with which limit passed first: `LIMIT` of virtual time or
/// `REAL_LIMIT` of real time. Virtual time moves only when no task can run and no blocking work
/// is in flight, so a scheduler that never rests (a loop firing again and again) would never
/// reach a virtual limit; the real one bounds it anyway.
async fn bounded<T>(wait: impl std::future::Future<Output = T>) -> Result<T, String> {
    let (finished, cancelled) = std::sync::mpsc::channel::<()>();
    let (expire, expired) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        if cancelled.recv_timeout(REAL_LIMIT) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            let _ = expire.send(());
        }
    });
    let result = tokio::select! {
        done = tokio::time::timeout(LIMIT, wait) => {
            done.map_err(|_| format!("not within {LIMIT:?} of virtual time"))
        }
        _ = expired => Err(format!("not within {REAL_LIMIT:?} of real time")),
    };
    drop(finished);
    result
}

/// One recorded run: job id, due time, when it started (on the schedulers' clock).
type Run = (String, DateTime<Utc>, DateTime<Utc>);

/// Records every run, on the clock the schedulers read, and announces the number of runs.
struct Recorder {
    clock: Arc<TokioClock>,
    runs: Mutex<Vec<Run>>,
    count: tokio::sync::watch::Sender<usize>,
}

#[async_trait]
impl JobRunner for Recorder {
    async fn run(&self, job: Job, due: DateTime<Utc>) -> Result<(), String> {
        let mut runs = self.runs.lock().unwrap();
        runs.push((job.id, due, self.clock.now()));
        self.count.send_replace(runs.len());
        Ok(())
    }
}

impl Recorder {
    fn new(clock: &Arc<TokioClock>) -> Arc<Self> {
        Arc::new(Self {
            clock: clock.clone(),
            runs: Mutex::new(Vec::new()),
            count: tokio::sync::watch::Sender::new(0),
        })
    }

    fn ids(&self) -> Vec<String> {
        self.runs
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.0.clone())
            .collect()
    }

    fn run(&self, i: usize) -> Run {
        self.runs.lock().unwrap()[i].clone()
    }

    /// Waits until `n` runs were recorded (woken by each run; bounded).
    async fn wait_for(&self, n: usize) {
        let mut count = self.count.subscribe();
        if let Err(limit) = bounded(async { count.wait_for(|&runs| runs >= n).await.is_ok() }).await
        {
            panic!("{n} runs {limit}: {:?}", self.ids());
        }
    }
}

/// A scheduler running in the test.
struct Running {
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    stop: CancellationToken,
}

impl Running {
    /// Starts a scheduler over `dir` on `recorder`'s clock, firing into `recorder`.
    fn start(dir: &Path, recorder: &Arc<Recorder>) -> Self {
        let stop = CancellationToken::new();
        let scheduler =
            Scheduler::new(dir, true, recorder.clone()).with_clock(recorder.clock.clone());
        Self {
            task: tokio::spawn(scheduler.run(stop.clone())),
            stop,
        }
    }

    /// Stops the scheduler and waits for it to end (bounded).
    async fn stop(self) {
        self.stop.cancel();
        bounded(self.task)
            .await
            .unwrap_or_else(|limit| panic!("the scheduler stops {limit}"))
            .unwrap()
            .unwrap();
    }
}

/// Whether a scheduler holds the owner lock of `dir`: taking it here fails. (Taking it, when
/// free, lasts only until this returns.)
fn owned(dir: &Path) -> bool {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("scheduler.lock"))
        .unwrap();
    matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock))
}

/// Waits until `holds` is true, looking again after each 10 ms of virtual time (bounded).
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut holds: impl FnMut() -> F) {
    let waited = bounded(async {
        while !holds().await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    if let Err(limit) = waited {
        panic!("{what}: {limit}");
    }
}

async fn add_once(store: &dyn JobStore, id: &str, at: DateTime<Utc>) {
    let id = id.to_owned();
    store
        .change(move |jobs| jobs.push(job(&id, once(at), Some(at))))
        .await
        .unwrap();
}

/// `run` started at or after its due time, and less than `bound` after it.
fn on_time((id, due, fired): &Run, bound: chrono::Duration) {
    assert!(fired >= due, "{id} not early: due {due}, fired {fired}");
    assert!(*fired - *due < bound, "{id} late by {}", *fired - *due);
}

#[tokio::test(start_paused = true)]
async fn owner_fires_due_jobs_added_by_other_processes() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(dir.path(), None);
    let clock = Arc::new(TokioClock::new());
    let recorder = Recorder::new(&clock);
    let scheduler = Running::start(dir.path(), &recorder);
    until("the scheduler is the owner", || async { owned(dir.path()) }).await;
    // Added "by another process": only the file changes, nobody notifies the owner.
    let due = clock.now() + chrono::Duration::milliseconds(700);
    add_once(&*store, "a", due).await;
    recorder.wait_for(1).await;
    let run = recorder.run(0);
    assert_eq!((run.0.as_str(), run.1), ("a", due));
    on_time(&run, chrono::Duration::milliseconds(1500));
    // The run is finished on disk: a one-shot job is gone.
    until("the job is removed after its run", || async {
        store.list().await.unwrap().is_empty()
    })
    .await;

    // The owner has read the store since its last change: a job added now is seen only through
    // the store's version, within a second.
    let due = clock.now() + chrono::Duration::milliseconds(300);
    add_once(&*store, "b", due).await;
    recorder.wait_for(2).await;
    let run = recorder.run(1);
    assert_eq!((run.0.as_str(), run.1), ("b", due));
    on_time(&run, chrono::Duration::milliseconds(1500));
    scheduler.stop().await;
    assert_eq!(recorder.ids(), ["a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn two_schedulers_on_one_home_fire_each_job_once_and_the_standby_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(dir.path(), None);
    let clock = Arc::new(TokioClock::new());
    let (first, second) = (Recorder::new(&clock), Recorder::new(&clock));
    let first_scheduler = Running::start(dir.path(), &first);
    until("the first is the owner", || async { owned(dir.path()) }).await;
    let second_scheduler = Running::start(dir.path(), &second);
    let now = clock.now();
    for i in 0..5 {
        add_once(
            &*store,
            &format!("j{i}"),
            now + chrono::Duration::milliseconds(300),
        )
        .await;
    }
    first.wait_for(5).await;
    assert!(second.ids().is_empty(), "the standby fired nothing");

    // The owner exits; the standby takes over within its retry period and fires new jobs.
    first_scheduler.stop().await;
    add_once(&*store, "after", clock.now()).await;
    second.wait_for(1).await;
    assert_eq!(second.ids(), ["after"]);
    assert_eq!(first.ids().len(), 5, "each job fired exactly once");
    second_scheduler.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_claimed_run_does_not_fire_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(dir.path(), None);
    let clock = Arc::new(TokioClock::new());
    // The previous owner claimed "every" (running) and died; "missed" was due while no one ran.
    let now = clock.now();
    let mut every_job = job(
        "every",
        every(3600, now - chrono::Duration::minutes(10)),
        None,
    );
    every_job.next_run = every_job.trigger.next_after(now);
    every_job.last_status = Some(RunStatus::Running);
    store
        .change(move |jobs| jobs.push(every_job))
        .await
        .unwrap();
    add_once(&*store, "missed", now - chrono::Duration::hours(2)).await;

    let recorder = Recorder::new(&clock);
    let scheduler = Running::start(dir.path(), &recorder);
    recorder.wait_for(1).await;
    // 1.5 s of virtual time: the owner looks at the store again and fires nothing more.
    bounded(tokio::time::sleep(Duration::from_millis(1500)))
        .await
        .unwrap();
    assert_eq!(
        recorder.ids(),
        ["missed"],
        "caught up once; the interrupted run not repeated"
    );
    let jobs = store.list().await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].last_status, Some(RunStatus::Interrupted));
    scheduler.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_valid_job_fires_next_to_a_rejected_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(dir.path(), None);
    let clock = Arc::new(TokioClock::new());
    let due = clock.now() + chrono::Duration::milliseconds(500);
    let due_text = due.to_rfc3339();
    write_jobs(
        dir.path(),
        &[
            hand_job(
                "bad",
                serde_json::json!({"kind": "once", "at": "tomorrow"}),
                &due_text,
            ),
            hand_job(
                "good",
                serde_json::json!({"kind": "once", "at": due_text}),
                &due_text,
            ),
            hand_job(
                "badcron",
                serde_json::json!({"kind": "cron", "expr": "every day"}),
                &due_text,
            ),
        ],
    );
    let recorder = Recorder::new(&clock);
    let scheduler = Running::start(dir.path(), &recorder);
    recorder.wait_for(1).await;
    assert_eq!(recorder.ids(), ["good"]);
    let run = recorder.run(0);
    assert_eq!(run.1, due);
    on_time(&run, chrono::Duration::milliseconds(1500));
    let rejected: Vec<String> = store
        .rejected()
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().unwrap().to_owned())
        .collect();
    assert_eq!(rejected, ["bad", "badcron"]);
    scheduler.stop().await;
    assert_eq!(recorder.ids(), ["good"]);
}
