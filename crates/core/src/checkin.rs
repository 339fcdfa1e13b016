//! Workers seen from both sides: which of a pool's jobs runs a worker that has checked in with
//! the CodaLab server (`GET /rest/workers/info`), and what that worker is doing.
//!
//! Pure. The manager gives each launch a unique id (`new_unique`, 32 lowercase hex digits) that
//! ends the worker's `--id` (`<host>-<worker id>`, see [`crate::command`]) and the job's id or
//! name on every platform, so a job and a check-in are matched on that unique id
//! ([`launch_unique`]): hostname prefixes and ids of workers other managers (or people) started
//! never match. The server's `checkin_time` is its own clock and is never compared with ours:
//! how long a job has gone without a check-in is measured on the manager clock, from when the
//! platform said it runs or when the server last listed it ([`JobCheckin::Missing`]).
//!
//! A job is then [`WorkerState::Starting`] (pending, or running and not checked in yet),
//! [`WorkerState::ReadyIdle`] (checked in, no runs), [`WorkerState::Busy`] (runs, or is
//! terminating) or [`WorkerState::Lost`] (running, no check-in for longer than the pool's
//! `checkin_timeout`, judged only on a view the server just gave: [`worker_state`]).

use crate::backend::JobState;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Default `checkin_timeout` / `--worker-checkin-timeout`: how long a running job may go
/// without its worker checking in before it is lost. The server drops a worker it has not heard
/// from for 60 s, and a worker checks in every few seconds once up; five minutes leaves room
/// for pulling the worker image and starting `cl-worker`.
pub const DEFAULT_CHECKIN_TIMEOUT: Duration = Duration::from_secs(300);

/// Length of a launch's unique id (`uuid::Uuid::simple`).
const UNIQUE_LEN: usize = 32;

/// One entry of `GET /rest/workers/info`: the fields the manager uses.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CheckedInWorker {
    /// The worker's `--id`.
    pub worker_id: String,
    /// Bundles the worker runs.
    #[serde(default)]
    pub run_uuids: Vec<String>,
    /// The worker is shutting down: it takes no new bundle.
    #[serde(default)]
    pub is_terminating: bool,
    /// Its last check-in, in seconds on the server's clock (shown, never compared).
    #[serde(default)]
    pub checkin_time: Option<f64>,
}

/// The unique id of the launch a worker id or job id/name ends with, if it does: its last 32
/// characters when they are all lowercase hex digits.
pub fn launch_unique(id: &str) -> Option<&str> {
    let start = id.len().checked_sub(UNIQUE_LEN)?;
    let tail = id.get(start..)?;
    tail.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        .then_some(tail)
}

/// The server's workers, by the launch unique their id ends with (others are left out).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckinView {
    by_unique: FxHashMap<String, CheckedInWorker>,
}

impl CheckinView {
    /// The view of `workers` as the server listed them.
    pub fn new(workers: Vec<CheckedInWorker>) -> Self {
        let by_unique = workers
            .into_iter()
            .filter_map(|w| Some((launch_unique(&w.worker_id)?.to_owned(), w)))
            .collect();
        Self { by_unique }
    }

    /// The worker of the job with platform id `id` and name `name`, if it has checked in.
    pub fn worker_of(&self, id: &str, name: &str) -> Option<&CheckedInWorker> {
        [id, name]
            .into_iter()
            .filter_map(launch_unique)
            .find_map(|unique| self.by_unique.get(unique))
    }

    /// Workers in the view (those with a launch unique).
    pub fn len(&self) -> usize {
        self.by_unique.len()
    }

    /// No worker in the view.
    pub fn is_empty(&self) -> bool {
        self.by_unique.is_empty()
    }
}

/// What the manager knows of one job's check-in this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobCheckin {
    /// Nothing: no view of the server's workers yet, or the job's id and name carry no launch
    /// unique (its check-in cannot be matched). Judged by the platform state alone.
    #[default]
    Unknown,
    /// The server lists the job's worker.
    CheckedIn {
        /// Bundles it runs.
        runs: usize,
        /// It is shutting down.
        terminating: bool,
    },
    /// The server does not list the job's worker.
    Missing {
        /// Since the platform said the job runs, or since the server last listed its worker
        /// (the later), on the manager clock; zero while the job is pending.
        unseen_for: Duration,
        /// The server listed the worker before (it checked in, then vanished).
        was_seen: bool,
        /// The view is this tick's: the last workers-info call succeeded. A stale view never
        /// makes a worker lost.
        fresh: bool,
    },
}

/// A job's state, seen from the platform and the server together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// Pending, or running without having checked in yet.
    Starting,
    /// Checked in, runs nothing: capacity the server is about to use.
    ReadyIdle,
    /// Checked in and running bundles (or terminating).
    Busy,
    /// Running on the platform, no check-in for longer than the timeout.
    Lost,
}

impl WorkerState {
    /// Every state, in display order.
    pub const ALL: [WorkerState; 4] = [
        WorkerState::Starting,
        WorkerState::ReadyIdle,
        WorkerState::Busy,
        WorkerState::Lost,
    ];

    /// The machine-readable name (`starting`, `ready_idle`, `busy`, `lost`).
    pub fn code(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::ReadyIdle => "ready_idle",
            WorkerState::Busy => "busy",
            WorkerState::Lost => "lost",
        }
    }
}

impl fmt::Display for WorkerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The state of a job in platform state `state` with check-in `checkin`, when the check-in is
/// known; `None` for jobs that are not capacity (failed, ended …) and for [`JobCheckin::Unknown`].
pub fn worker_state(
    state: JobState,
    checkin: JobCheckin,
    timeout: Duration,
) -> Option<WorkerState> {
    if !state.is_capacity() {
        return None;
    }
    match checkin {
        JobCheckin::Unknown => None,
        JobCheckin::CheckedIn { runs, terminating } if runs > 0 || terminating => {
            Some(WorkerState::Busy)
        }
        JobCheckin::CheckedIn { .. } => Some(WorkerState::ReadyIdle),
        JobCheckin::Missing {
            unseen_for, fresh, ..
        } if fresh && state == JobState::Active && unseen_for > timeout => Some(WorkerState::Lost),
        JobCheckin::Missing { .. } => Some(WorkerState::Starting),
    }
}

/// How long a running job has gone without a check-in, on the manager clock: since it became
/// active or since its worker was last listed, whichever is later.
pub fn unseen_for(
    now: Duration,
    active_since: Option<Duration>,
    last_seen: Option<Duration>,
) -> Duration {
    let since = match (active_since, last_seen) {
        (Some(a), Some(s)) => a.max(s),
        (a, s) => a.or(s).unwrap_or(now),
    };
    now.saturating_sub(since)
}

/// The manager's last view of the server's workers and whether it is this tick's (`fresh`:
/// the call just succeeded) or kept from an earlier tick (the call failed since).
#[derive(Debug, Clone, Copy)]
pub struct Sighting<'a> {
    /// The last view.
    pub view: &'a CheckinView,
    /// It is this tick's.
    pub fresh: bool,
}

/// When the manager saw a job become active and its worker last listed (manager clock).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobTimes {
    /// When the platform first said the job runs.
    pub active_since: Option<Duration>,
    /// When the server last listed the job's worker.
    pub last_seen: Option<Duration>,
}

/// What `sighting` says of the job with platform `id`, `name` and `state` at manager time
/// `now`. `None` (no view yet) and jobs without a launch unique give [`JobCheckin::Unknown`].
pub fn job_checkin(
    sighting: Option<Sighting<'_>>,
    (id, name, state): (&str, &str, JobState),
    times: JobTimes,
    now: Duration,
) -> JobCheckin {
    let Some(Sighting { view, fresh }) = sighting else {
        return JobCheckin::Unknown;
    };
    if launch_unique(id).or_else(|| launch_unique(name)).is_none() {
        return JobCheckin::Unknown;
    }
    match view.worker_of(id, name) {
        Some(worker) => JobCheckin::CheckedIn {
            runs: worker.run_uuids.len(),
            terminating: worker.is_terminating,
        },
        None => JobCheckin::Missing {
            unseen_for: match state {
                JobState::Active => unseen_for(now, times.active_since, times.last_seen),
                _ => Duration::ZERO,
            },
            was_seen: times.last_seen.is_some(),
            fresh,
        },
    }
}

#[cfg(test)]
mod tests;
