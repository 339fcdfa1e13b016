//! The status snapshot ([`Status`], from [`crate::Manager::status`]) and the per-tick events
//! ([`TickEvent`], in [`crate::manager::TickReport::events`]) that the status view and the
//! metrics of the manager are built from. Everything serialises to JSON in snake_case (the
//! terminal view of that JSON, as `cl-worker-manager status` prints it, is `codalab-wm-app`'s).
//!
//! [`Status`] reads back from that JSON too (missing fields take their defaults), so that
//! `status` and the page present one structure: it reads back from its JSON document (its
//! codes, `&'static str` where the manager writes them, through a table of interned codes).

use crate::bundle::WorkerShape;
use crate::checkin::WorkerState;
use crate::pools::{LaunchMode, PoolDecision, PoolHealth, UnmetDemand, UnservedBundle};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Failures kept in [`Status::recent_failures`].
pub const RECENT_FAILURES: usize = 20;

/// A worker shape, serialisable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ShapeStatus {
    /// CPUs per worker.
    pub cpus: u32,
    /// GPUs per worker.
    pub gpus: u32,
    /// Memory per worker in bytes.
    pub memory_bytes: u64,
}

impl From<WorkerShape> for ShapeStatus {
    fn from(shape: WorkerShape) -> Self {
        Self {
            cpus: shape.cpus,
            gpus: shape.gpus,
            memory_bytes: shape.memory_bytes,
        }
    }
}

/// One pool in the status snapshot.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PoolStatus {
    /// The pool's name.
    pub name: String,
    /// The backend's name (`slurm-batch`, `local` …).
    pub backend: String,
    /// Compat or target.
    pub launch_mode: LaunchMode,
    /// What one worker provides.
    pub shape: ShapeStatus,
    /// `min`.
    pub min: u32,
    /// `max`.
    pub max: u32,
    /// The pool's tag.
    pub tag: Option<String>,
    /// Whether the pool is exclusive to its tag.
    pub tag_exclusive: bool,
    /// Preference weight among pools of one price.
    pub cost: f64,
    /// What one worker-hour costs: the pool's price in the preference order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_hour: Option<f64>,
    /// The wait accepted here before bundles spill to a pricier pool, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill_after_seconds: Option<u64>,
    /// The pool its new launches go to when its capacity fails, and where they go now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<FallbackStatus>,
    /// Active jobs at the last tick.
    pub active: usize,
    /// Pending jobs at the last tick.
    pub pending: usize,
    /// Jobs listed as failed at the last tick.
    pub failed: usize,
    /// Jobs being stopped.
    pub stopping: usize,
    /// Jobs by state seen from both sides (`starting`, `ready_idle`, `busy`, `lost`) at the
    /// last tick; jobs whose check-in is unknown (no view of the server's workers yet, or a
    /// job the server's list cannot be matched to) are not counted.
    pub workers: BTreeMap<WorkerState, usize>,
    /// Failure memory.
    pub health: PoolHealth,
    /// The pool is skipped until then (seconds since the manager started), if it is.
    pub backing_off_until: Option<u64>,
    /// The pool is suspended for misconfiguration: it launches nothing until it is resumed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspended: Option<SuspensionStatus>,
    /// The last decision with its reasons.
    pub last_decision: Option<PoolDecision>,
    /// Staged bundles assigned to the pool at the last tick.
    pub assigned: Vec<String>,
}

/// A pool suspended for misconfiguration ([`crate::pools::PoolHealth::record_failure`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SuspensionStatus {
    /// Since when (seconds since the Unix epoch).
    pub since_unix_seconds: u64,
    /// Misconfiguration failures in a row, with the same error.
    pub failures: u32,
    /// The last of them.
    pub error: String,
}

/// A failure remembered for the status view.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FailureRecord {
    /// The pool.
    pub pool: String,
    /// When (seconds since the manager started).
    pub at_seconds: u64,
    /// `submit_failed`, `job_failed_before_active`, `ended_before_checkin`, `worker_lost`,
    /// `worker_unconfirmed` or `pending_timeout`.
    #[serde(deserialize_with = "crate::interned::deserialize")]
    pub kind: crate::interned::Code,
    /// What it says about the pool, and so what the manager did about it.
    pub class: crate::pools::FailureClass,
    /// The error, the job's reason, or the job id.
    pub detail: String,
}

/// A snapshot of the manager for the status view.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Status {
    /// Seconds since the manager started (the clock of every `*_seconds` field).
    pub uptime_seconds: u64,
    /// Ticks run (successful or not).
    pub ticks: u64,
    /// The error of the last tick, if it failed.
    pub last_error: Option<String>,
    /// When the last successful tick ended (seconds since the manager started), if one has.
    pub last_success_seconds: Option<u64>,
    /// How long the last tick took (successful or not), in seconds.
    pub last_tick_duration_seconds: f64,
    /// The manager's `sleep_time` at that tick, in seconds (a reload may change it): `/healthz`
    /// allows 3 of them since the last success, and the page refreshes every one.
    pub sleep_time_seconds: f64,
    /// Staged bundles seen at the last tick.
    pub staged: usize,
    /// Every pool.
    pub pools: Vec<PoolStatus>,
    /// Bundles no pool takes, with the reason.
    pub unserved: Vec<UnservedBundle>,
    /// Every staged bundle with no worker coming, by pool, bundle class and reason.
    pub unmet: Vec<UnmetDemand>,
    /// The last [`RECENT_FAILURES`] failures, oldest first.
    pub recent_failures: Vec<FailureRecord>,
    /// Running totals of the tick events (see [`TickEvent::counter`]).
    pub counters: Vec<Counter>,
    /// The last [`crate::events::RECENT_EVENTS`] events, oldest first.
    pub events: Vec<crate::events::Event>,
    /// Each budget with its use in the last 24 hours: all pools first (scope `all pools`),
    /// then each pool (limits `None` where none is set).
    pub budgets: Vec<crate::budget::BudgetStatus>,
    /// When the manager started, in seconds since the Unix epoch (`*_seconds` fields count
    /// from there).
    pub started_unix_seconds: u64,
    /// When each staged bundle read at the last tick is expected to start, and why.
    pub estimates: Vec<crate::estimate::BundleEstimate>,
    /// The estimates scored at the last tick: their bundles left `staged`.
    pub scored: Vec<ScoredEstimate>,
}

/// One estimate, scored when its bundle left `staged`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ScoredEstimate {
    /// The bundle uuid.
    pub uuid: String,
    /// The estimate's kind (`worker_checkin`, `after_runs` …).
    #[serde(deserialize_with = "crate::interned::deserialize")]
    pub kind: crate::interned::Code,
    /// |predicted start − the tick that saw it gone|, in seconds.
    pub error_seconds: u64,
}

/// How a launch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchResult {
    /// Submitted.
    Started,
    /// Rendered only (`--dry-run`).
    DryRun,
    /// Refused (counts as a failure; backs a target-mode pool off).
    Failed,
    /// A temporary error; retried on a later tick.
    TemporaryError,
}

impl LaunchResult {
    /// Every result.
    pub const ALL: [LaunchResult; 4] = [
        LaunchResult::Started,
        LaunchResult::DryRun,
        LaunchResult::Failed,
        LaunchResult::TemporaryError,
    ];

    /// The snake_case name.
    pub fn code(self) -> &'static str {
        match self {
            LaunchResult::Started => "started",
            LaunchResult::DryRun => "dry_run",
            LaunchResult::Failed => "failed",
            LaunchResult::TemporaryError => "temporary_error",
        }
    }
}

/// Something that happened in one tick, for metrics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TickEvent {
    /// A launch was tried.
    Launch {
        /// The pool.
        pool: String,
        /// How it ended.
        result: LaunchResult,
        /// The job id when it started, the error when it did not.
        detail: String,
    },
    /// A job was stopped (or the stop failed).
    Stop {
        /// The pool.
        pool: String,
        /// The job.
        job_id: String,
        /// Why (`pending_timeout`).
        reason: &'static str,
        /// Whether the backend accepted the stop.
        ok: bool,
    },
    /// A reason that fired in a pool's decision.
    Decision {
        /// The pool.
        pool: String,
        /// The reason code.
        reason: &'static str,
    },
    /// A bundle no pool takes.
    Unserved {
        /// The bundle.
        bundle: String,
        /// The reason code.
        reason: &'static str,
    },
    /// A job was seen failed for the first time.
    JobFailed {
        /// The pool.
        pool: String,
        /// The job.
        job_id: String,
        /// It failed (or ended) before its worker was ready: before its first check-in when the
        /// manager sees the server's workers, else before the platform said it runs. A failed
        /// start: the pool backs off.
        before_active: bool,
    },
    /// A job was seen preempted for the first time (the platform took its resources: Slurm
    /// PREEMPTED/NODE_FAIL, spot reclaim, eviction). Not a failure: no backoff, not counted
    /// toward `--exit-after-num-failed`.
    JobPreempted {
        /// The pool.
        pool: String,
        /// The job.
        job_id: String,
        /// The platform's reason, when it gave one.
        reason: Option<String>,
    },
    /// A pool started backing off.
    BackoffStarted {
        /// The pool.
        pool: String,
        /// Failures in the streak.
        failures: u32,
        /// End of the backoff (seconds since the manager started).
        until_seconds: u64,
    },
    /// A failure of the pool (a failed start, a lost worker, a job pending too long), with
    /// its class.
    Failure {
        /// The pool.
        pool: String,
        /// What it says about the pool.
        class: crate::pools::FailureClass,
    },
    /// A pool was suspended for misconfiguration: it launches nothing until it is resumed.
    PoolSuspended {
        /// The pool.
        pool: String,
        /// Misconfiguration failures in a row, with the same error.
        failures: u32,
        /// The last of them.
        detail: String,
    },
    /// A suspended pool was resumed.
    PoolResumed {
        /// The pool.
        pool: String,
        /// Why, in words (`reloaded`, `its settings changed`, `a worker of the pool checked in`).
        why: &'static str,
    },
    /// A job the platform had stopped was deleted by its backend
    /// ([`crate::WorkerBackend::take_reaped`]).
    JobReaped {
        /// The pool.
        pool: String,
        /// The job.
        job_id: String,
    },
    /// A job's worker checked in, then vanished from the server's list (noted once).
    WorkerVanished {
        /// The pool.
        pool: String,
        /// The job.
        job_id: String,
    },
    /// A pool with a `fallback` changed where its new launches go.
    CapacitySwitched(crate::events::CapacitySwitch),
}

/// A pool's fallback and where its new launches go ([`crate::pools::fallback`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FallbackStatus {
    /// The fallback pool.
    pub pool: String,
    /// Own, on the fallback (since when, until when, why) or retrying.
    pub capacity: crate::pools::fallback::CapacityState,
}

/// A running total in [`Status::counters`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Counter {
    /// `launches`, `stops`, `decisions`, `unserved`, `job_failures`, `job_preemptions`,
    /// `backoffs`, `failures` (by class) or `suspensions`.
    #[serde(deserialize_with = "crate::interned::deserialize")]
    pub metric: crate::interned::Code,
    /// The pool (empty for `unserved`).
    pub pool: String,
    /// The result or reason (`started`, `pending_timeout`, `rate_limited` …).
    pub label: String,
    /// The total.
    pub value: u64,
}

impl TickEvent {
    /// The counter this event increments: `(metric, pool, label)`.
    pub fn counter(&self) -> (&'static str, String, String) {
        match self {
            TickEvent::Launch { pool, result, .. } => {
                ("launches", pool.clone(), result.code().to_owned())
            }
            TickEvent::Stop {
                pool, reason, ok, ..
            } => (
                "stops",
                pool.clone(),
                if *ok {
                    (*reason).to_owned()
                } else {
                    format!("{reason}_failed")
                },
            ),
            TickEvent::Decision { pool, reason } => {
                ("decisions", pool.clone(), (*reason).to_owned())
            }
            TickEvent::Unserved { reason, .. } => ("unserved", String::new(), (*reason).to_owned()),
            TickEvent::JobFailed {
                pool,
                before_active,
                ..
            } => (
                "job_failures",
                pool.clone(),
                if *before_active {
                    "before_active"
                } else {
                    "after_active"
                }
                .to_owned(),
            ),
            TickEvent::JobPreempted { pool, .. } => {
                ("job_preemptions", pool.clone(), "preempted".to_owned())
            }
            TickEvent::BackoffStarted { pool, .. } => {
                ("backoffs", pool.clone(), "started".to_owned())
            }
            TickEvent::Failure { pool, class } => {
                ("failures", pool.clone(), class.code().to_owned())
            }
            TickEvent::PoolSuspended { pool, .. } => {
                ("suspensions", pool.clone(), "suspended".to_owned())
            }
            TickEvent::PoolResumed { pool, .. } => {
                ("suspensions", pool.clone(), "resumed".to_owned())
            }
            TickEvent::JobReaped { pool, .. } => ("reaped", pool.clone(), "stopped".to_owned()),
            TickEvent::WorkerVanished { pool, .. } => {
                ("workers_vanished", pool.clone(), "vanished".to_owned())
            }
            TickEvent::CapacitySwitched(switch) => (
                "capacity_switches",
                switch.pool.clone(),
                switch.switch.to_owned(),
            ),
        }
    }
}

/// Running totals of events.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counters(BTreeMap<(&'static str, String, String), u64>);

impl Counters {
    pub(crate) fn add(&mut self, events: &[TickEvent]) {
        for event in events {
            self.count(event.counter());
        }
    }

    /// Adds one to the counter `(metric, pool, label)`; also used for failed ticks
    /// (`server_errors`, no pool, the kind of error).
    pub(crate) fn count(&mut self, key: (&'static str, String, String)) {
        *self.0.entry(key).or_default() += 1;
    }

    pub(crate) fn snapshot(&self) -> Vec<Counter> {
        self.0
            .iter()
            .map(|((metric, pool, label), value)| Counter {
                metric,
                pool: pool.clone(),
                label: label.clone(),
                value: *value,
            })
            .collect()
    }
}
