//! The scheduler's decisions as pure functions of the job list and `now`: what to do with runs
//! missed while no scheduler was alive, which jobs are due, and what a finished run leaves.
//!
//! Invariant: a run is *claimed* (`last_run` set, `next_run` moved past `now`) and written to
//! `jobs.json` before it executes, so one due time never fires twice, even across a restart;
//! a crash mid-run loses that run rather than repeating it.

use chrono::{DateTime, Utc};

use super::job::{Job, RunStatus};

/// A run to execute: the job as claimed and the due time it fires for.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub job: Job,
    pub due: DateTime<Utc>,
}

/// Prepares the jobs when a process becomes the scheduler: runs interrupted by a crash are
/// closed (never fired again here: the daemon resumes a journaled run from its inbox), and
/// missed runs are kept to fire at once (`catch_up`, coalesced by [`claim_due`]) or skipped.
/// Returns one log note per job touched.
pub fn recover(jobs: &mut Vec<Job>, now: DateTime<Utc>, catch_up: bool) -> Vec<String> {
    let mut notes = Vec::new();
    jobs.retain_mut(|job| {
        if job.last_status == Some(RunStatus::Running) {
            job.last_status = Some(RunStatus::Interrupted);
            if job.next_run.is_none() {
                notes.push(format!(
                    "job {} was interrupted by a restart; not fired again (the inbox resumes \
                     a journaled run)",
                    job.id
                ));
                return false;
            }
        }
        let Some(next) = job.next_run else {
            return job.trigger.is_recurring();
        };
        if next >= now || catch_up {
            return true;
        }
        notes.push(format!(
            "job {} missed its run at {next} (catch-up is off)",
            job.id
        ));
        job.last_status = Some(RunStatus::Missed);
        job.next_run = job.trigger.next_after(now);
        job.next_run.is_some()
    });
    notes
}

/// Claims every job due at `now` that is not already running: records the run and moves the
/// job to its next run strictly after `now` (so a recurring job that missed several runs fires
/// once). One-shot jobs keep no next run.
pub fn claim_due(jobs: &mut [Job], now: DateTime<Utc>) -> Vec<Claim> {
    let mut claims = Vec::new();
    for job in jobs.iter_mut() {
        let Some(due) = job.next_run.filter(|due| *due <= now) else {
            continue;
        };
        if job.last_status == Some(RunStatus::Running) {
            continue;
        }
        job.last_run = Some(now);
        job.last_status = Some(RunStatus::Running);
        job.next_run = job.trigger.next_after(now);
        claims.push(Claim {
            job: job.clone(),
            due,
        });
    }
    claims
}

/// Records how runs ended (`(job id, status)`); a one-shot job with no further run is removed.
pub fn finish(jobs: &mut Vec<Job>, ended: &[(String, RunStatus)]) {
    jobs.retain_mut(|job| {
        let Some((_, status)) = ended.iter().find(|(id, _)| *id == job.id) else {
            return true;
        };
        job.last_status = Some(status.clone());
        job.next_run.is_some() || job.trigger.is_recurring()
    });
}

/// The earliest next run among jobs that are not running.
pub fn next_due(jobs: &[Job]) -> Option<DateTime<Utc>> {
    jobs.iter()
        .filter(|j| j.last_status != Some(RunStatus::Running))
        .filter_map(|j| j.next_run)
        .min()
}
