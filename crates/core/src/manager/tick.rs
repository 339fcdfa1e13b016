//! One tick: observe → plan → act → report. The plan step asks the pure pool policy and logs
//! its decision; the report step counts the tick's events and publishes the status snapshot
//! (also after a failed tick, with its error).

use super::observe::Observed;
use super::{Manager, logs};
use crate::backend::WorkerJob;
use crate::error::Result;
use crate::estimate::BundleEstimate;
use crate::events::EventKind;
use crate::policy::Decision;
use crate::pools::{PoolDecision, PoolPolicy, PoolsDecision};
use crate::status::{LaunchResult, ScoredEstimate, Status, TickEvent};
use tokio::time::Instant;

/// What one tick saw and did.
#[derive(Debug, Clone)]
pub struct TickReport {
    /// The search keywords used.
    pub keywords: Vec<String>,
    /// Staged bundles matching the search, read or not (the server's `.count`).
    pub staged: usize,
    /// Staged bundles read this tick, oldest first: what the pools can absorb, plus those
    /// that fit no pool before them (the pool policy sees these; see `pools::need`).
    pub read: usize,
    /// Search requests this tick: pages, and the count unless the pages read the whole list.
    pub search_requests: usize,
    /// Bundles read last tick that are no longer staged, as far as this tick's read shows
    /// (see `manager::logs::update_window`).
    pub removed: usize,
    /// Bundles read this tick that fit no pool (the prefilter).
    pub filtered: usize,
    /// Bundles read this tick and skipped because a field was malformed.
    pub malformed: usize,
    /// Worker jobs that count (pending + active).
    pub jobs: usize,
    /// Active worker jobs.
    pub active: usize,
    /// Pending worker jobs.
    pub pending: usize,
    /// Jobs seen failed for the first time this tick.
    pub newly_failed: Vec<WorkerJob>,
    /// Upstream's decision: in the single-backend mode the pool's decision with its reasons;
    /// otherwise the total launches and no reasons (see `pools`).
    pub decision: Decision,
    /// Jobs started this tick (all pools).
    pub launched: Vec<WorkerJob>,
    /// Launches that failed this tick, with the error.
    pub launch_errors: Vec<String>,
    /// The pool policy's decision: per pool launches, stops and reasons; per bundle the pool
    /// or the reason none takes it.
    pub pools: PoolsDecision,
    /// What happened, for metrics: launches by result, stops by reason, decisions by reason,
    /// unserved bundles by reason, failed jobs, backoffs (see [`TickEvent::counter`]).
    pub events: Vec<TickEvent>,
    /// When each staged bundle read is expected to start, and why.
    pub estimates: Vec<BundleEstimate>,
    /// Estimates scored this tick: their bundles left `staged`.
    pub scored: Vec<ScoredEstimate>,
}

impl Manager {
    /// One iteration. Errors are those of the server search or, when every pool's listing
    /// fails, the first listing error (a pool whose listing fails while others succeed is
    /// skipped with reason `unobserved`). A failed launch is reported in the [`TickReport`]
    /// and counted, not returned.
    pub async fn tick(&mut self) -> Result<TickReport> {
        self.ticks += 1;
        self.tick_started = Instant::now();
        let result = match self.observe().await {
            Ok(observed) => {
                let mut report = self.plan(observed);
                self.act(&mut report).await;
                (self.engine).launched_for_overdue(&report.pools, &report.events);
                Ok(report)
            }
            Err(error) => Err(error),
        };
        self.report(&result);
        let decision = result.as_ref().ok().map(|report| &report.pools);
        self.history_ticked(decision, self.clock());
        result
    }

    /// Asks the engine to plan, logs its decision and starts the tick's report.
    fn plan(&mut self, mut observed: Observed) -> TickReport {
        let start = super::unix_start(observed.now);
        let planned =
            (self.engine).plan(&mut observed.pools, observed.complete, observed.now, start);
        for event in planned.events {
            self.journal.record(observed.now, event);
        }
        let decision = planned.decision;
        let policies = self.policies();
        let filtered = logs::note_unserved(&mut self.reported, &policies, &decision);
        logs::log_decisions(&policies, &decision, observed.staged, observed.removed);
        logs::note_spills(&mut self.spilled, &decision);
        let totals = |f: fn(&PoolDecision) -> usize| decision.pools.iter().map(f).sum::<usize>();
        let (active, pending) = (totals(|d| d.active), totals(|d| d.pending));
        let mut events = observed.events;
        events.extend(logs::decision_events(&decision));
        TickReport {
            keywords: observed.keywords,
            staged: observed.staged,
            read: observed.pools.bundles.len(),
            search_requests: observed.search_requests,
            removed: observed.removed,
            filtered,
            malformed: observed.malformed,
            jobs: active + pending,
            active,
            pending,
            newly_failed: observed.newly_failed,
            decision: upstream_decision(&policies, &decision),
            launched: Vec::new(),
            launch_errors: Vec::new(),
            pools: decision,
            events,
            estimates: planned.estimates,
            scored: planned.scored,
        }
    }

    /// Counts the tick's events and publishes the status snapshot; a failed tick counts as
    /// a `server_errors` event of its kind and leaves its error in the snapshot.
    fn report(&mut self, result: &Result<TickReport>) {
        let now = self.clock();
        let report = match result {
            Ok(report) => report,
            Err(error) => {
                let kind = super::error_policy::tick_error_kind(error).to_owned();
                self.journal.tick_failed(now, &kind, error.to_string());
                self.counters.count(("server_errors", String::new(), kind));
                let events = self.journal.recent();
                self.status.send_modify(|status| {
                    status.events = events;
                    status.uptime_seconds = now.as_secs();
                    status.ticks = self.ticks;
                    status.last_error = Some(error.to_string());
                    status.last_tick_duration_seconds = self.tick_started.elapsed().as_secs_f64();
                    status.sleep_time_seconds = self.config.sleep_time.as_secs_f64();
                    status.counters = self.counters.snapshot();
                });
                return;
            }
        };
        self.counters.add(&report.events);
        self.journal.tick_succeeded(now);
        self.note_recoveries(now);
        for kind in from_tick(&report.events, now.as_secs()) {
            self.journal.record(now, kind);
        }
        let status = Status {
            uptime_seconds: now.as_secs(),
            ticks: self.ticks,
            last_error: None,
            last_success_seconds: Some(now.as_secs()),
            last_tick_duration_seconds: self.tick_started.elapsed().as_secs_f64(),
            sleep_time_seconds: self.config.sleep_time.as_secs_f64(),
            staged: report.staged,
            pools: self.engine.pools.iter().map(|p| p.status(now)).collect(),
            unserved: report.pools.unserved.clone(),
            unmet: report.pools.unmet.clone(),
            recent_failures: self.engine.recent_failures().cloned().collect(),
            counters: self.counters.snapshot(),
            events: self.journal.recent(),
            budgets: self.engine.budgets().to_vec(),
            started_unix_seconds: self.journal.started_unix(),
            estimates: report.estimates.clone(),
            scored: report.scored.clone(),
        };
        self.status.send_replace(status);
    }

    /// Records `pool_recovered` for each pool whose backoff, announced earlier, is over.
    fn note_recoveries(&mut self, now: std::time::Duration) {
        for runtime in &mut self.engine.pools {
            // A suspended pool has its own events (`pool_suspended`, `pool_resumed`).
            let backing_off = runtime.health.backing_off(now).is_some() || runtime.health.suspended;
            if runtime.announced_backoff && !backing_off {
                let pool = runtime.name().to_owned();
                self.journal
                    .record(now, crate::events::EventKind::PoolRecovered { pool });
            }
            runtime.announced_backoff = backing_off;
        }
    }
}

/// [`TickReport::decision`]: the single-backend pool's decision with its reasons, otherwise
/// the total launches.
fn upstream_decision(policies: &[PoolPolicy], decision: &PoolsDecision) -> Decision {
    match (policies, decision.pools.as_slice()) {
        ([policy], [pool]) if policy.is_single_backend() => pool.as_upstream(),
        _ => Decision {
            launches: decision.launches(),
            reasons: Vec::new(),
        },
    }
}

/// The events of one tick's [`TickEvent`]s, in their order: launches started or refused (a
/// temporary error, retried next tick, and a dry run are not events), stuck jobs stopped, lost
/// workers stopped, launches withdrawn, jobs failed before they became active, preempted jobs, pools backing off,
/// suspended and resumed.
/// `now_seconds` is the manager clock at the end of the tick.
pub(super) fn from_tick(tick_events: &[TickEvent], now_seconds: u64) -> Vec<EventKind> {
    tick_events
        .iter()
        .filter_map(|e| from_tick_event(e, now_seconds))
        .collect()
}

fn from_tick_event(event: &TickEvent, now_seconds: u64) -> Option<EventKind> {
    let kind = match event {
        TickEvent::Launch {
            pool,
            result: LaunchResult::Started,
            detail,
        } => EventKind::WorkerLaunched {
            pool: pool.clone(),
            job_id: detail.clone(),
        },
        TickEvent::Launch {
            pool,
            result: LaunchResult::Failed,
            detail,
        } => EventKind::LaunchFailed {
            pool: pool.clone(),
            error: detail.clone(),
        },
        TickEvent::Stop {
            pool,
            job_id,
            reason,
            ok,
        } => return stop_event(pool, job_id, reason, *ok),
        TickEvent::JobFailed {
            pool,
            job_id,
            before_active: true,
        } => EventKind::LaunchFailed {
            pool: pool.clone(),
            error: format!("job {job_id} failed before it became active"),
        },
        TickEvent::JobPreempted {
            pool,
            job_id,
            reason,
        } => EventKind::WorkerPreempted {
            pool: pool.clone(),
            job_id: job_id.clone(),
            reason: reason.clone(),
        },
        TickEvent::CapacitySwitched(switch) => EventKind::CapacitySwitched(switch.clone()),
        TickEvent::JobReaped { pool, job_id } => EventKind::WorkerReaped {
            pool: pool.clone(),
            job_id: job_id.clone(),
        },
        TickEvent::PoolSuspended {
            pool,
            failures,
            detail,
        } => EventKind::PoolSuspended {
            pool: pool.clone(),
            failures: *failures,
            error: detail.clone(),
        },
        TickEvent::PoolResumed { pool, why } => EventKind::PoolResumed {
            pool: pool.clone(),
            why: (*why).to_owned(),
        },
        TickEvent::BackoffStarted {
            pool,
            failures,
            until_seconds,
        } => EventKind::PoolBackingOff {
            pool: pool.clone(),
            failures: *failures,
            until_seconds: *until_seconds,
            for_seconds: until_seconds.saturating_sub(now_seconds),
        },
        _ => return None,
    };
    Some(kind)
}

/// The event of a stop: a stuck job or a lost worker stopped (or tried: a failed stop is in
/// the log too), a launch withdrawn (once it is).
fn stop_event(pool: &str, job_id: &str, reason: &str, ok: bool) -> Option<EventKind> {
    let (pool, job_id) = (pool.to_owned(), job_id.to_owned());
    match reason {
        "pending_timeout" | "blocked" => Some(EventKind::StuckPendingStopped { pool, job_id }),
        "worker_lost" => Some(EventKind::WorkerLost { pool, job_id }),
        "withdrawn" if ok => Some(EventKind::LaunchWithdrawn { pool, job_id }),
        _ => None,
    }
}
