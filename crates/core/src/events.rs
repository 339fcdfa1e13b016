//! The manager's events: what an admin wants to be told about (a worker launched, a launch
//! failed, a pool backing off or recovered, a worker lost or preempted, a stuck job stopped, a
//! budget reached, the configuration reloaded, the server unreachable or back).
//!
//! One typed stream ([`Event`]) feeds the log (target `codalab_wm::event`), the status
//! snapshot ([`crate::status::Status::events`], the last [`RECENT_EVENTS`]), the
//! dashboard, and the webhooks of `[[notify]]` ([`crate::notify`]). Events are derived from
//! what a tick saw and did (`from_tick`, in `manager/tick.rs` beside its caller: this module
//! knows nothing of the manager) and from the changes between ticks the manager notices (the
//! server unreachable / back, a reload); that derivation is pure.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Events kept in the status snapshot.
pub const RECENT_EVENTS: usize = 50;

/// Something that happened, with when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// When, in seconds since the manager started (the clock of the status snapshot).
    pub at_seconds: u64,
    /// When, in seconds since the Unix epoch (the manager's start plus `at_seconds`).
    pub unix_seconds: u64,
    /// Whether an admin may want to act.
    pub severity: Severity,
    /// One line for a person (the kind's `Display`).
    pub message: String,
    /// What.
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    /// `kind` at `at_seconds` of a manager that started at `started_unix` (Unix seconds).
    pub fn new(kind: EventKind, at_seconds: u64, started_unix: u64) -> Self {
        Self {
            at_seconds,
            unix_seconds: started_unix + at_seconds,
            severity: kind.severity(),
            message: kind.to_string(),
            kind,
        }
    }
}

/// A pool with a `fallback` changed where its new launches go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacitySwitch {
    /// The pool.
    pub pool: String,
    /// Its fallback.
    pub fallback: String,
    /// `to_fallback`, `retry` or `restored`.
    #[serde(deserialize_with = "crate::interned::deserialize")]
    pub switch: crate::interned::Code,
    /// Why (to the fallback).
    pub why: Option<String>,
}

impl fmt::Display for CapacitySwitch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (pool, fallback) = (&self.pool, &self.fallback);
        match self.switch {
            "to_fallback" => write!(
                f,
                "pool {pool}: new launches go to {fallback}: {}",
                self.why.as_deref().unwrap_or("its capacity failed")
            ),
            "retry" => write!(
                f,
                "pool {pool}: cool-down over; one launch tries it again, the rest go to {fallback}"
            ),
            _ => write!(
                f,
                "pool {pool}: a worker checked in; it takes its launches again ({fallback} no longer gets them)"
            ),
        }
    }
}

/// How much an event matters to an admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Things going as they should.
    Info,
    /// Something an admin may want to act on.
    Warning,
}

/// What happened. Serialised with the code in `event` (`worker_launched` …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// A worker job was submitted.
    WorkerLaunched {
        /// The pool.
        pool: String,
        /// The platform's job id.
        job_id: String,
    },
    /// A launch was refused, or a job failed before it became active.
    LaunchFailed {
        /// The pool.
        pool: String,
        /// The error or the job's reason.
        error: String,
    },
    /// A pool started backing off after failures.
    PoolBackingOff {
        /// The pool.
        pool: String,
        /// Failures in the streak.
        failures: u32,
        /// End of the backoff (seconds since the manager started).
        until_seconds: u64,
        /// How long it backs off, in seconds.
        for_seconds: u64,
    },
    /// A pool that was backing off launches again.
    PoolRecovered {
        /// The pool.
        pool: String,
    },
    /// A pool was suspended for misconfiguration: the same error again and again
    /// ([`crate::pools::MISCONFIGURED_AFTER`] failures in a row). It launches nothing until
    /// its settings change or an admin resumes it (a reload).
    PoolSuspended {
        /// The pool.
        pool: String,
        /// Misconfiguration failures in a row, with the same error.
        failures: u32,
        /// The last of them.
        error: String,
    },
    /// A suspended pool launches again.
    PoolResumed {
        /// The pool.
        pool: String,
        /// Why: `reloaded`, `its settings changed`, `a worker of the pool checked in` ….
        why: String,
    },
    /// A running job whose worker never checked in within the pool's check-in timeout was
    /// stopped and replaced (`lost`; a worker that checked in once is never stopped).
    WorkerLost {
        /// The pool.
        pool: String,
        /// The job.
        job_id: String,
    },
    /// The platform took a worker's resources (spot reclaim, Slurm preemption, eviction).
    WorkerPreempted {
        /// The pool.
        pool: String,
        /// The job.
        job_id: String,
        /// The platform's reason, when it gave one.
        reason: Option<String>,
    },
    /// A job the platform had stopped was deleted by the manager.
    WorkerReaped {
        /// The pool.
        pool: String,
        /// The job.
        job_id: String,
    },
    /// A pending job was stopped: pending longer than the pool's `pending_timeout`, or its platform
    /// said it will not start as it is (`blocked`).
    StuckPendingStopped {
        /// The pool.
        pool: String,
        /// The job.
        job_id: String,
    },
    /// A pending job the plan no longer needed was cancelled before it started.
    LaunchWithdrawn {
        /// The pool.
        pool: String,
        /// The job.
        job_id: String,
    },
    /// A pool with a `fallback` changed where its new launches go
    /// ([`crate::pools::fallback`]).
    CapacitySwitched(CapacitySwitch),
    /// A budget is used up: no launches until the window rolls on.
    BudgetReached {
        /// The pool, or `all pools` for the overall budget.
        scope: String,
        /// What ran out (`worker_hours` or `cost`), with the figures.
        detail: String,
    },
    /// A budget has room again.
    BudgetRestored {
        /// The pool, or `all pools`.
        scope: String,
    },
    /// A new configuration was applied (SIGHUP).
    ConfigReloaded {
        /// What changed.
        changes: Vec<String>,
    },
    /// The CodaLab server could not be reached or refused the manager (ticks skipped).
    ServerUnreachable {
        /// The error.
        error: String,
    },
    /// The CodaLab server answers again.
    ServerBack {
        /// Seconds it was unreachable.
        after_seconds: u64,
    },
}

impl EventKind {
    /// The machine-readable name (`worker_launched` …), as `[[notify]] events` lists them.
    pub fn code(&self) -> &'static str {
        match self {
            EventKind::WorkerLaunched { .. } => "worker_launched",
            EventKind::LaunchFailed { .. } => "launch_failed",
            EventKind::PoolBackingOff { .. } => "pool_backing_off",
            EventKind::PoolRecovered { .. } => "pool_recovered",
            EventKind::PoolSuspended { .. } => "pool_suspended",
            EventKind::PoolResumed { .. } => "pool_resumed",
            EventKind::WorkerLost { .. } => "worker_lost",
            EventKind::WorkerPreempted { .. } => "worker_preempted",
            EventKind::WorkerReaped { .. } => "worker_reaped",
            EventKind::StuckPendingStopped { .. } => "stuck_pending_stopped",
            EventKind::LaunchWithdrawn { .. } => "launch_withdrawn",
            EventKind::CapacitySwitched(_) => "capacity_switched",
            EventKind::BudgetReached { .. } => "budget_reached",
            EventKind::BudgetRestored { .. } => "budget_restored",
            EventKind::ConfigReloaded { .. } => "config_reloaded",
            EventKind::ServerUnreachable { .. } => "server_unreachable",
            EventKind::ServerBack { .. } => "server_back",
        }
    }

    /// Every code, for config checks and help.
    pub const CODES: &'static [&'static str] = &[
        "worker_launched",
        "launch_failed",
        "pool_backing_off",
        "pool_recovered",
        "pool_suspended",
        "pool_resumed",
        "worker_lost",
        "worker_preempted",
        "worker_reaped",
        "stuck_pending_stopped",
        "launch_withdrawn",
        "capacity_switched",
        "budget_reached",
        "budget_restored",
        "config_reloaded",
        "server_unreachable",
        "server_back",
    ];

    /// Whether an admin may want to act on it.
    pub fn severity(&self) -> Severity {
        match self {
            EventKind::LaunchFailed { .. }
            | EventKind::PoolBackingOff { .. }
            | EventKind::PoolSuspended { .. }
            | EventKind::WorkerLost { .. }
            | EventKind::StuckPendingStopped { .. }
            | EventKind::BudgetReached { .. }
            | EventKind::ServerUnreachable { .. } => Severity::Warning,
            EventKind::CapacitySwitched(switch) if switch.switch == "to_fallback" => {
                Severity::Warning
            }
            _ => Severity::Info,
        }
    }

    /// Whether the manager already logs this at its own level where it happens (a launch,
    /// a stop, a failed tick …): the journal then logs it at debug only, so that each thing is
    /// said once in the log. Budgets, recoveries and reaping are said by the journal alone.
    pub fn logged_elsewhere(&self) -> bool {
        !matches!(
            self,
            EventKind::PoolRecovered { .. }
                | EventKind::BudgetReached { .. }
                | EventKind::BudgetRestored { .. }
                | EventKind::WorkerReaped { .. }
        )
    }

    /// The pool it concerns, if one.
    pub fn pool(&self) -> Option<&str> {
        match self {
            EventKind::WorkerLaunched { pool, .. }
            | EventKind::LaunchFailed { pool, .. }
            | EventKind::PoolBackingOff { pool, .. }
            | EventKind::PoolRecovered { pool }
            | EventKind::PoolSuspended { pool, .. }
            | EventKind::PoolResumed { pool, .. }
            | EventKind::WorkerLost { pool, .. }
            | EventKind::WorkerPreempted { pool, .. }
            | EventKind::WorkerReaped { pool, .. }
            | EventKind::StuckPendingStopped { pool, .. }
            | EventKind::LaunchWithdrawn { pool, .. } => Some(pool),
            EventKind::CapacitySwitched(switch) => Some(&switch.pool),
            _ => None,
        }
    }
}

impl fmt::Display for EventKind {
    /// One line for a person (the log, the page, a Slack message).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventKind::WorkerLaunched { pool, job_id } => {
                write!(f, "pool {pool}: worker launched (job {job_id})")
            }
            EventKind::LaunchFailed { pool, error } => {
                write!(f, "pool {pool}: launch failed: {error}")
            }
            EventKind::PoolBackingOff {
                pool,
                failures,
                for_seconds,
                ..
            } => write!(
                f,
                "pool {pool}: no launches for {for_seconds} s after {failures} failure{} in a row",
                if *failures == 1 { "" } else { "s" }
            ),
            EventKind::PoolRecovered { pool } => write!(f, "pool {pool}: launching again"),
            EventKind::PoolSuspended {
                pool,
                failures,
                error,
            } => write!(
                f,
                "pool {pool}: suspended for misconfiguration after {failures} failures in a row \
                 with the same error ({error}); no launches until its settings are fixed and \
                 reloaded"
            ),
            EventKind::PoolResumed { pool, why } => {
                write!(f, "pool {pool}: resumed ({why}), launching again")
            }
            EventKind::WorkerLost { pool, job_id } => {
                write!(f, "pool {pool}: worker lost (job {job_id}), stopped")
            }
            EventKind::WorkerPreempted {
                pool,
                job_id,
                reason,
            } => match reason {
                Some(reason) => write!(f, "pool {pool}: job {job_id} preempted ({reason})"),
                None => write!(f, "pool {pool}: job {job_id} preempted"),
            },
            EventKind::WorkerReaped { pool, job_id } => {
                write!(f, "pool {pool}: stopped job {job_id} deleted")
            }
            EventKind::StuckPendingStopped { pool, job_id } => {
                write!(f, "pool {pool}: job {job_id} pending too long, stopped")
            }
            EventKind::LaunchWithdrawn { pool, job_id } => {
                write!(
                    f,
                    "pool {pool}: pending job {job_id} withdrawn (no longer needed)"
                )
            }
            EventKind::CapacitySwitched(switch) => write!(f, "{switch}"),
            EventKind::BudgetReached { scope, detail } => {
                write!(f, "budget of {scope} reached: {detail}; no new launches")
            }
            EventKind::BudgetRestored { scope } => {
                write!(f, "budget of {scope} has room again: launching resumes")
            }
            EventKind::ConfigReloaded { changes } => match changes.as_slice() {
                [] => write!(f, "configuration reloaded: nothing changed"),
                _ => write!(f, "configuration reloaded: {}", changes.join("; ")),
            },
            EventKind::ServerUnreachable { error } => {
                write!(f, "CodaLab server unreachable: {error}")
            }
            EventKind::ServerBack { after_seconds } => {
                write!(f, "CodaLab server back after {after_seconds} s")
            }
        }
    }
}
