//! The act step's rules: what a kept job, a stop and a launch mean for a pool's memory (its
//! record, backoff and capacity state) and the tick's events. The driver stops and submits;
//! these steps take what came back. A launch is written to the pool's record before its
//! submit ([`Engine::launching`]): a job this manager launched is always in its record, and
//! its minimum life in the budget use.

use super::{Engine, runtime};
use crate::backend::WorkerJob;
use crate::error::Error;
use crate::policy::{NotStoppedWhy, Reason};
use crate::pools::{FailureClass, LaunchMode, PoolDecision, PoolsDecision};
use crate::status::{LaunchResult, TickEvent};
use std::collections::BTreeSet;
use std::time::Duration;

/// What one launch's result means for the tick.
#[derive(Debug)]
pub(crate) struct LaunchOutcome {
    /// The launch event, and what its failure started (a backoff, a capacity switch).
    pub events: Vec<TickEvent>,
    /// Whether the pool goes on launching this tick.
    pub go_on: bool,
}

impl Engine {
    /// Says once per job why a job a rule would stop is kept; a job of this manager that
    /// never checked in while no worker of the pool ever did counts as a failed start (the
    /// pool backs off: it does not keep launching workers nobody sees).
    pub fn note_kept(
        &mut self,
        index: usize,
        decision: &PoolDecision,
        now: Duration,
    ) -> Vec<TickEvent> {
        let runtime = &mut self.pools[index];
        let mut events = Vec::new();
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
                    let news = runtime.fail(
                        now,
                        "worker_unconfirmed",
                        FailureClass::Misconfiguration,
                        format!("job {job_id}: {reason}"),
                    );
                    events.extend(news.events);
                    runtime::remember(&mut self.recent_failures, news.failures);
                }
            }
        }
        events
    }

    /// Takes the stops of pool `index`'s `decision` as the driver made them (each job's
    /// result, or its error): a stopped job is over by this manager's hand; a lost worker,
    /// a blocked job and the stuck pending jobs count as failed starts of the pool (backoff):
    /// a lost worker as transient, a blocked job by what its platform said, the stuck ones
    /// as capacity (with a capacity event); a withdrawn launch is none (the pool did nothing
    /// wrong). `server` names the server in the lost workers' message.
    pub fn stopped(
        &mut self,
        index: usize,
        decision: &PoolDecision,
        results: Vec<(String, Result<(), String>)>,
        server: &str,
        now: Duration,
    ) -> Vec<TickEvent> {
        let runtime = &mut self.pools[index];
        let mut events = Vec::new();
        let mut stuck = Vec::new();
        let mut failures = Vec::new();
        for (id, result) in results {
            let why = stop_reason(decision, &id);
            let reason = why.map_or("pending_timeout", Reason::code);
            let platform = (runtime.listed.iter())
                .find(|j| j.id == id)
                .and_then(|j| j.reason.clone());
            log_stop(
                runtime.name(),
                &id,
                why,
                &result,
                server,
                platform.as_deref(),
            );
            if result.is_ok() {
                runtime.stopping.insert(id.clone());
            }
            events.push(TickEvent::Stop {
                pool: runtime.name().to_owned(),
                job_id: id.clone(),
                reason,
                ok: result.is_ok(),
            });
            match why {
                Some(lost @ Reason::WorkerLost { .. }) => failures.push((
                    "worker_lost",
                    FailureClass::Transient,
                    format!("job {id}: {}", lost_message(lost, server)),
                )),
                Some(Reason::Blocked { misconfigured, .. }) => failures.push((
                    "blocked",
                    match misconfigured {
                        true => FailureClass::Misconfiguration,
                        false => FailureClass::Capacity,
                    },
                    format!("job {id}: {}", platform.as_deref().unwrap_or("blocked")),
                )),
                Some(Reason::Withdrawn { .. }) => {}
                _ => stuck.push(id),
            }
        }
        if !stuck.is_empty() {
            let what = format!("jobs {} pending too long", stuck.join(", "));
            failures.push(("pending_timeout", FailureClass::Capacity, what));
        }
        for (kind, class, detail) in failures {
            let news = runtime.fail(now, kind, class, detail.clone());
            events.extend(news.events);
            if class == FailureClass::Capacity {
                events.extend(runtime.capacity_event(now, detail));
            }
            runtime::remember(&mut self.recent_failures, news.failures);
        }
        events
    }

    /// A launch of `unique` on pool `index` is about to be submitted: written to the pool's
    /// record with its minimum life charged to the budget use, in one write (none for a dry
    /// run). `start` is the clock's zero as time since the Unix epoch.
    pub fn launching(&mut self, index: usize, unique: &str, now: Duration, start: Duration) {
        self.pools[index].launching(unique, now, start);
    }

    /// Takes the result of the submit of `unique` on pool `index` (see
    /// [`Engine::launching`]). A temporary error is retried on a later tick; any other
    /// failure counts as a failed start of the pool (and, for no capacity, a capacity event).
    pub fn launch_result(
        &mut self,
        index: usize,
        unique: &str,
        result: &Result<WorkerJob, Error>,
        dry_run: bool,
        now: Duration,
        start: Duration,
    ) -> LaunchOutcome {
        let runtime = &mut self.pools[index];
        let pool = runtime.name().to_owned();
        if result.is_err() && !dry_run {
            runtime.launch_failed(unique, now, start);
        }
        let (result, detail, mut follow, go_on) = match result {
            Ok(job) => {
                runtime.launched(job, now);
                self.estimates.launched(&pool, &job.id, now);
                let outcome = match dry_run {
                    true => LaunchResult::DryRun,
                    false => LaunchResult::Started,
                };
                (outcome, job.id.clone(), Vec::new(), true)
            }
            Err(error) if error.is_temporary() => {
                tracing::warn!(pool, %error, "could not start a worker job; will retry on a later tick");
                (
                    LaunchResult::TemporaryError,
                    error.to_string(),
                    Vec::new(),
                    false,
                )
            }
            Err(error) => {
                runtime.last_launch = Some(now);
                self.num_failed += 1;
                tracing::error!(pool, %error, failed = self.num_failed, "failed to start a worker job");
                let news =
                    runtime.fail(now, "submit_failed", submit_class(error), error.to_string());
                let mut follow = news.events;
                if matches!(error, Error::NoCapacity { .. }) {
                    follow.extend(runtime.capacity_event(now, error.to_string()));
                }
                runtime::remember(&mut self.recent_failures, news.failures);
                let compat = runtime.pool.policy.launch_mode == LaunchMode::Compat;
                (LaunchResult::Failed, error.to_string(), follow, compat)
            }
        };
        // What the failure started (a backoff) comes after the launch it follows.
        let mut events = vec![TickEvent::Launch {
            pool,
            result,
            detail,
        }];
        events.append(&mut follow);
        LaunchOutcome { events, go_on }
    }

    /// Remembers each pool's decision and the bundles assigned to it, for its status, since
    /// when its decisions have found a surplus (for the next plan's withdrawals), and the
    /// launches it made for hedges (`start`: the clock's zero as time since the Unix epoch).
    pub fn decided(&mut self, decision: &PoolsDecision, now: Duration, start: Duration) {
        for (runtime, pool) in self.pools.iter_mut().zip(&decision.pools) {
            runtime.hedged(pool.hedges, now, start);
            runtime.surplus_since = match pool.surplus {
                0 => None,
                _ => Some(runtime.surplus_since.unwrap_or(now)),
            };
            runtime.last_decision = Some(pool.clone());
            runtime.assigned = (decision.assignments.iter())
                .filter(|a| a.pool == pool.pool)
                .map(|a| a.uuid.clone())
                .collect();
        }
    }

    /// Remembers the overdue bundles a launch was made for this tick: those the decision
    /// launches for on a pool that started at least one worker (`events`: the tick's; a pool
    /// whose every launch failed launched for none of them, and they are launched for
    /// again). The pool's record remembers them too: a restart launches no other for them.
    pub fn launched_for_overdue(&mut self, decision: &PoolsDecision, events: &[TickEvent]) {
        if decision.overdue_launches.is_empty() {
            return;
        }
        let started: BTreeSet<&str> = (events.iter())
            .filter_map(|event| match event {
                TickEvent::Launch { pool, result, .. }
                    if *result != LaunchResult::Failed
                        && *result != LaunchResult::TemporaryError =>
                {
                    Some(pool.as_str())
                }
                _ => None,
            })
            .collect();
        let made: Vec<_> = (decision.assignments.iter())
            .filter(|a| decision.overdue_launches.contains(&a.uuid))
            .filter(|a| started.contains(a.pool.as_str()))
            .collect();
        for runtime in &mut self.pools {
            let mine: Vec<String> = (made.iter())
                .filter(|a| a.pool == runtime.name())
                .map(|a| a.uuid.clone())
                .collect();
            if !mine.is_empty() {
                runtime.record.launched_for_overdue(&mine);
            }
        }
        let made: Vec<String> = made.iter().map(|a| a.uuid.clone()).collect();
        self.server.launched_for(&made);
    }
}

/// The reason `decision` stops job `id` for: its worker is lost, it is withdrawn, its
/// platform says it will not start, or (none of those) it was pending too long.
fn stop_reason<'a>(decision: &'a PoolDecision, id: &str) -> Option<&'a Reason> {
    decision.reasons.iter().find(|r| match r {
        Reason::WorkerLost { job_id, .. }
        | Reason::Withdrawn { job_id, .. }
        | Reason::Blocked { job_id, .. } => job_id == id,
        _ => false,
    })
}

/// Says what stopping job `id` of `pool` for `why` did (`platform`: the platform's reason
/// for the job's state, when it gave one).
fn log_stop(
    pool: &str,
    id: &str,
    why: Option<&Reason>,
    result: &Result<(), String>,
    server: &str,
    platform: Option<&str>,
) {
    let reason = why.map_or("pending_timeout", Reason::code);
    match (why, result) {
        (Some(lost @ Reason::WorkerLost { .. }), Ok(())) => {
            let message = lost_message(lost, server);
            tracing::error!(pool, job = %id, reason, "worker job {id} is lost and stopped; it {message}");
        }
        (Some(lost @ Reason::WorkerLost { .. }), Err(error)) => {
            let message = lost_message(lost, server);
            tracing::warn!(pool, job = %id, %error, "cannot stop lost worker job {id} ({message})");
        }
        (Some(withdrawn @ Reason::Withdrawn { .. }), Ok(())) => {
            tracing::info!(pool, job = %id, reason, "{withdrawn}: cancelled before it started");
        }
        (Some(Reason::Withdrawn { .. }), Err(error)) => {
            tracing::warn!(pool, job = %id, %error, "cannot withdraw pending job {id}; it stays and counts as capacity");
        }
        (Some(blocked @ Reason::Blocked { .. }), Ok(())) => {
            let platform = platform.unwrap_or("no reason given");
            tracing::warn!(pool, job = %id, reason, "{blocked} ({platform}); cancelled before it started");
        }
        (Some(Reason::Blocked { .. }), Err(error)) => {
            tracing::warn!(pool, job = %id, %error, "cannot stop blocked pending job {id}; it stays and counts toward max");
        }
        (_, Ok(())) => {
            tracing::info!(pool, job = %id, reason, "stopped a stuck pending job; its demand goes to the next fitting pool");
        }
        (_, Err(error)) => {
            tracing::warn!(pool, job = %id, %error, "cannot stop a stuck pending job");
        }
    }
}

/// Why a lost worker is stopped, with what to check: the log line and the failure record.
fn lost_message(reason: &Reason, server: &str) -> String {
    match reason {
        Reason::WorkerLost { unseen_seconds, .. } => format!(
            "never checked in after {unseen_seconds} s: check the worker image, credentials, and that nodes reach {server}"
        ),
        other => other.to_string(),
    }
}

/// The class of a submit the platform refused for good (a temporary error is retried on a
/// later tick and is no failure): no capacity is the platform's; anything else, a queue,
/// image, credential or setting it does not take, is the pool's settings.
fn submit_class(error: &Error) -> FailureClass {
    match error {
        Error::NoCapacity { .. } => FailureClass::Capacity,
        _ => FailureClass::Misconfiguration,
    }
}
