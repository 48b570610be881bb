//! Benchmark of the scheduler with 10k jobs (`cargo bench --bench scheduler`):
//! * `jobs.json` size, load time (lock + read + parse + check + sort; best of five, and the first
//!   load, before the checked cron expressions are remembered) and the memory the jobs take;
//! * jitter: the delay between a job's due time and its run starting, for 200 jobs due one
//!   every 50 ms among 10k (each firing rewrites the file twice: claim, then finish);
//! * a burst: 1000 of the 10k jobs due at the same instant — time until all have started.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use bub::scheduler::job::{Job, Trigger};
use bub::scheduler::{JobRunner, Scheduler, store};

const JOBS: usize = 10_000;

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    rt.block_on(load(dir.path()));
    rt.block_on(jitter(dir.path(), 200, Duration::from_millis(50)));
    let dir = tempfile::tempdir().expect("temp dir");
    rt.block_on(burst(dir.path(), 1000));
}

fn rss_anon_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// `n` jobs that will not fire during the run, of all three trigger kinds.
fn background_jobs(n: usize, now: DateTime<Utc>) -> Vec<Job> {
    (0..n)
        .map(|i| {
            let trigger = match i % 3 {
                0 => Trigger::Cron {
                    expr: format!("{} {} 1 1 *", i % 60, i % 24),
                    timezone: Some("Europe/Berlin".into()),
                },
                1 => Trigger::Interval {
                    seconds: 86_400 + i as u64,
                    start: now,
                },
                _ => Trigger::Once {
                    at: now + chrono::Duration::days(30),
                },
            };
            job(&format!("bg{i:05}"), trigger, now)
        })
        .collect()
}

fn job(id: &str, trigger: Trigger, now: DateTime<Utc>) -> Job {
    Job {
        id: id.into(),
        session: format!("telegram:{}", id.len()),
        message: "check the build status and report anything unusual to the chat".into(),
        workspace: "/workspace".into(),
        next_run: trigger.next_after(now),
        trigger,
        created: now,
        last_run: None,
        last_status: None,
        creator: None,
    }
}

async fn load(home: &std::path::Path) {
    let store = store::open(home, None);
    let jobs = background_jobs(JOBS, Utc::now());
    store.change(move |all| *all = jobs).await.expect("write");
    let size = std::fs::metadata(home.join("jobs.json"))
        .expect("file")
        .len();
    let before = rss_anon_mb();
    let mut best = Duration::MAX;
    let mut first = None;
    let mut kept = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let jobs = store.list().await.expect("load");
        let took = start.elapsed();
        first.get_or_insert(took);
        best = best.min(took);
        kept = jobs;
    }
    let after = rss_anon_mb();
    println!(
        "scheduler.load ({} jobs, {:.1} MB file): {:.1} ms (first load in the process: {:.1} ms), \
         {:.1} MB in memory (RssAnon delta)",
        kept.len(),
        size as f64 / 1e6,
        best.as_secs_f64() * 1e3,
        first.unwrap_or_default().as_secs_f64() * 1e3,
        after - before
    );
}

/// Records when each run started, relative to its due time.
#[derive(Default)]
struct Recorder {
    late: Mutex<Vec<Duration>>,
}

#[async_trait]
impl JobRunner for Recorder {
    async fn run(&self, _job: Job, due: DateTime<Utc>) -> Result<(), String> {
        let late = (Utc::now() - due).to_std().unwrap_or_default();
        self.late.lock().unwrap().push(late);
        Ok(())
    }
}

impl Recorder {
    async fn wait_for(&self, n: usize, limit: Duration) -> Vec<Duration> {
        let deadline = Instant::now() + limit;
        loop {
            let late = self.late.lock().unwrap().clone();
            if late.len() >= n || Instant::now() > deadline {
                return late;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

async fn run_scheduler(home: &std::path::Path, jobs: Vec<Job>, n: usize) -> Vec<Duration> {
    store::open(home, None)
        .change(move |all| *all = jobs)
        .await
        .expect("write jobs");
    let recorder = Arc::new(Recorder::default());
    let stop = CancellationToken::new();
    let task = tokio::spawn(Scheduler::new(home, true, recorder.clone()).run(stop.clone()));
    let mut late = recorder.wait_for(n, Duration::from_secs(120)).await;
    stop.cancel();
    let _ = task.await;
    late.sort();
    late
}

async fn jitter(home: &std::path::Path, due: usize, every: Duration) {
    let now = Utc::now();
    let first = now + chrono::Duration::seconds(2);
    let mut jobs = background_jobs(JOBS - due, now);
    for i in 0..due {
        let at = first + chrono::Duration::from_std(every * i as u32).expect("duration");
        jobs.push(job(&format!("due{i:04}"), Trigger::Once { at }, now));
    }
    let late = run_scheduler(home, jobs, due).await;
    println!(
        "scheduler.jitter ({due} runs due every {} among {JOBS} jobs): p50 {} p95 {} max {} ({} fired)",
        ms(every),
        ms(percentile(&late, 0.5)),
        ms(percentile(&late, 0.95)),
        ms(*late.last().expect("runs")),
        late.len()
    );
}

async fn burst(home: &std::path::Path, due: usize) {
    let now = Utc::now();
    let at = now + chrono::Duration::seconds(2);
    let mut jobs = background_jobs(JOBS - due, now);
    for i in 0..due {
        jobs.push(job(&format!("due{i:04}"), Trigger::Once { at }, now));
    }
    let late = run_scheduler(home, jobs, due).await;
    println!(
        "scheduler.burst ({due} of {JOBS} jobs due at one instant): all started {} after the due time (p50 {})",
        ms(*late.last().expect("runs")),
        ms(percentile(&late, 0.5)),
    );
}
