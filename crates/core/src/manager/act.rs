//! The act step of a tick: pool by pool, stop the stuck jobs the policy named, then launch
//! what it decided (stopping early when a shutdown is requested or a launch fails), and
//! remember each pool's decision for the status snapshot.

use super::runtime;
use super::status::{LaunchResult, TickEvent};
use super::{Manager, TickReport, shutdown};
use crate::backend::{JobState, LaunchRequest, WorkerJob, new_unique};
use crate::policy::{NotStoppedWhy, Reason};
use crate::pools::{LaunchMode, PoolDecision};

impl Manager {
    /// Stops stuck jobs, then launches, pool by pool.
    pub(super) async fn act(&mut self, report: &mut TickReport) {
        let decisions = report.pools.pools.clone();
        for (index, decision) in decisions.iter().enumerate() {
            self.note_kept(index, decision, report);
            self.stop_stuck(index, decision, report).await;
            for _ in 0..decision.launches {
                if self.stop_flags.stopping() || !self.launch(index, report).await {
                    break;
                }
            }
        }
        for (runtime, decision) in self.pools.iter_mut().zip(&report.pools.pools) {
            runtime.last_decision = Some(decision.clone());
            runtime.assigned = report
                .pools
                .assignments
                .iter()
                .filter(|a| a.pool == decision.pool)
                .map(|a| a.uuid.clone())
                .collect();
        }
    }

    /// Says once per job why a job a rule would stop is kept; a job of this manager that
    /// never checked in while no worker of the pool ever did counts as a failed start (the
    /// pool backs off: it does not keep launching workers nobody sees).
    fn note_kept(&mut self, index: usize, decision: &PoolDecision, report: &mut TickReport) {
        let now = self.clock();
        let runtime = &mut self.pools[index];
        for reason in &decision.reasons {
            let Reason::NotStopped { job_id, why, .. } = reason else {
                continue;
            };
            if !runtime.kept_noted.insert(job_id.clone()) {
                continue;
            }
            match why {
                NotStoppedWhy::NotLaunchedHere => {
                    tracing::warn!(pool = runtime.name(), job = %job_id, "{reason}: it counts toward max and is never stopped by this manager (another manager with the same job names or labels? give each manager its own)");
                }
                NotStoppedWhy::NoCheckinSeen => {
                    tracing::error!(pool = runtime.name(), job = %job_id, "{reason}: this manager's account sees no worker of this pool; if the workers log in as another CodaLab account, give them the manager's account; else check the worker image and that nodes reach the server");
                    let news =
                        runtime.fail(now, "worker_unconfirmed", format!("job {job_id}: {reason}"));
                    report.events.extend(news.events);
                    runtime::remember(&mut self.recent_failures, news.failures);
                }
            }
        }
    }

    async fn stop_stuck(&mut self, index: usize, decision: &PoolDecision, report: &mut TickReport) {
        if decision.stops.is_empty() {
            return;
        }
        if self.config.dry_run {
            // A dry run changes nothing on the platform: it may run beside the live manager.
            let pool = self.pools[index].name();
            for id in &decision.stops {
                tracing::info!(pool, job = %id, dry_run = true, "would stop job {id} (dry run: nothing is stopped)");
            }
            return;
        }
        let now = self.clock();
        let server = self.client.server().to_owned();
        let runtime = &mut self.pools[index];
        let mut stuck = Vec::new();
        for id in &decision.stops {
            if let Some(lost) = lost_reason(decision, id) {
                let event =
                    stop_lost(runtime, id, lost, &server, now, &mut self.recent_failures).await;
                report.events.extend(event);
                continue;
            }
            stuck.push(id.clone());
            let job = runtime
                .listed
                .iter()
                .find(|j| &j.id == id)
                .cloned()
                .unwrap_or_else(|| WorkerJob::new(id.clone(), JobState::Pending));
            let result = runtime.pool.backend.stop_worker_job(&job).await;
            let ok = result.is_ok();
            match result {
                Ok(()) => {
                    tracing::info!(pool = runtime.name(), job = %id, reason = "pending_timeout", "stopped a stuck pending job; its demand goes to the next fitting pool");
                    runtime.stopping.insert(id.clone());
                }
                Err(error) => {
                    tracing::warn!(pool = runtime.name(), job = %id, %error, "cannot stop a stuck pending job");
                }
            }
            report.events.push(TickEvent::Stop {
                pool: runtime.name().to_owned(),
                job_id: id.clone(),
                reason: "pending_timeout",
                ok,
            });
        }
        if stuck.is_empty() {
            return;
        }
        let what = format!("jobs {} pending too long", stuck.join(", "));
        let news = runtime.fail(now, "pending_timeout", what.clone());
        report.events.extend(news.events);
        report.events.extend(runtime.capacity_event(now, what));
        runtime::remember(&mut self.recent_failures, news.failures);
    }

    /// One launch on pool `index`. Returns whether to go on launching on this pool this tick.
    async fn launch(&mut self, index: usize, report: &mut TickReport) -> bool {
        let unique = new_unique();
        let dry_run = self.config.dry_run;
        let now = self.clock();
        let start = super::record::unix_now().saturating_sub(now);
        let runtime = &mut self.pools[index];
        let pool_name = runtime.name().to_owned();
        if !dry_run {
            // Written before the submit: a job this manager launched is always in its record,
            // and its minimum life in the budget use (`budgets.rs`).
            runtime.launching(&unique, now, start);
        }
        let request = LaunchRequest {
            unique: &unique,
            worker: &runtime.pool.worker,
            dry_run,
        };
        let submitting = shutdown::Submitting::new(&self.stop_flags.submitting);
        let result = runtime.pool.backend.start_worker_job(&request).await;
        drop(submitting);
        if result.is_err() && !dry_run {
            runtime.launch_failed(&unique, now, start);
        }
        let mut news_events = Vec::new();
        let (outcome, detail, go_on) = match result {
            Ok(job) => {
                let output = runtime.pool.backend.job_output(&job);
                tracing::info!(pool = %pool_name, job = %job.id, backend = runtime.pool.backend.name(), dry_run, output = output.as_deref(), "started a worker job{}", output.as_deref().map(|o| format!("; its output goes to {o}")).unwrap_or_default());
                runtime.launched(&job, now);
                self.estimates.launched(&pool_name, &job.id, now);
                let id = job.id.clone();
                report.launched.push(job);
                let outcome = match dry_run {
                    true => LaunchResult::DryRun,
                    false => LaunchResult::Started,
                };
                (outcome, id, true)
            }
            Err(error) if error.is_temporary() => {
                tracing::warn!(pool = %pool_name, %error, "could not start a worker job; will retry on a later tick");
                report.launch_errors.push(error.to_string());
                (LaunchResult::TemporaryError, error.to_string(), false)
            }
            Err(error) => {
                runtime.last_launch = Some(now);
                self.num_failed += 1;
                tracing::error!(pool = %pool_name, %error, failed = self.num_failed, "failed to start a worker job");
                report.launch_errors.push(error.to_string());
                let news = runtime.fail(now, "submit_failed", error.to_string());
                news_events = news.events;
                if matches!(error, crate::Error::NoCapacity { .. }) {
                    news_events.extend(runtime.capacity_event(now, error.to_string()));
                }
                runtime::remember(&mut self.recent_failures, news.failures);
                let compat = runtime.pool.policy.launch_mode == LaunchMode::Compat;
                (LaunchResult::Failed, error.to_string(), compat)
            }
        };
        report.events.push(TickEvent::Launch {
            pool: pool_name,
            result: outcome,
            detail,
        });
        // What the failure started (a backoff) comes after the launch it follows.
        report.events.extend(news_events);
        go_on
    }
}

/// The `worker_lost` reason of job `id` in `decision`, if it is lost.
fn lost_reason<'a>(decision: &'a PoolDecision, id: &str) -> Option<&'a Reason> {
    decision
        .reasons
        .iter()
        .find(|r| matches!(r, Reason::WorkerLost { job_id, .. } if job_id == id))
}

/// Why a lost worker is stopped, with what to check: the log line and the failure record.
pub(crate) fn lost_message(reason: &Reason, server: &str) -> String {
    match reason {
        Reason::WorkerLost { unseen_seconds, .. } => format!(
            "never checked in after {unseen_seconds} s: check the worker image, credentials, and that nodes reach {server}"
        ),
        other => other.to_string(),
    }
}

/// Stops a lost job, logs why (once: a stopped job is not judged again), and counts it as a
/// failed start of the pool (backoff). Returns the tick's events.
async fn stop_lost(
    runtime: &mut runtime::PoolRuntime,
    id: &str,
    reason: &Reason,
    server: &str,
    now: std::time::Duration,
    recent: &mut std::collections::VecDeque<super::status::FailureRecord>,
) -> Vec<TickEvent> {
    let message = lost_message(reason, server);
    let job = runtime
        .listed
        .iter()
        .find(|j| j.id == id)
        .cloned()
        .unwrap_or_else(|| WorkerJob::new(id, JobState::Active));
    let result = runtime.pool.backend.stop_worker_job(&job).await;
    let ok = result.is_ok();
    match result {
        Ok(()) => {
            tracing::error!(pool = runtime.name(), job = %id, reason = "worker_lost", "worker job {id} is lost and stopped; it {message}");
            runtime.stopping.insert(id.to_owned());
        }
        Err(error) => {
            tracing::warn!(pool = runtime.name(), job = %id, %error, "cannot stop lost worker job {id} ({message})");
        }
    }
    let mut events = vec![TickEvent::Stop {
        pool: runtime.name().to_owned(),
        job_id: id.to_owned(),
        reason: "worker_lost",
        ok,
    }];
    let news = runtime.fail(now, "worker_lost", format!("job {id}: {message}"));
    events.extend(news.events);
    runtime::remember(recent, news.failures);
    events
}
