//! Workers seen from both sides: which of a pool's jobs runs a worker that has checked in with
//! the CodaLab server (`GET /rest/workers/info`), and what that worker is doing.
//!
//! Pure. The manager gives each launch a unique id (`new_unique`, 32 lowercase hex digits) that
//! ends the worker's `--id` (`<host>-<worker id>`, see [`crate::command`]) and the job's id or
//! name on every platform, so a job and a check-in are matched on that unique id
//! ([`launch_unique`]): hostname prefixes and ids of workers other managers (or people) started
//! never match. The server's `checkin_time` is its own clock and is never compared with ours:
//! how long a job has gone without a check-in is measured on the manager clock, from when the
//! platform said it runs or when the server last listed it ([`JobCheckin::NotYet`]).
//!
//! A job is then [`WorkerState::Starting`] (pending, or running and not checked in yet),
//! [`WorkerState::ReadyIdle`] (checked in, no runs), [`WorkerState::Busy`] (runs, or is
//! terminating), [`WorkerState::Vanished`] (checked in before, not listed now: presumed busy,
//! never stopped) or [`WorkerState::Lost`] (running and **never** checked in for longer than
//! the pool's `checkin_timeout`, counted over fresh views only: [`worker_state`]).

use crate::backend::JobState;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Default `checkin_timeout` / `--worker-checkin-timeout`: how long a running job whose worker
/// never checked in may go on so (over fresh views) before it is lost. A worker checks in
/// every few seconds once up; five minutes leaves room for pulling the worker image and
/// starting `cl-worker`. A worker that checked in once is never lost.
pub const DEFAULT_CHECKIN_TIMEOUT: Duration = Duration::from_secs(300);

/// How long CodaLab 1.7.5 keeps a worker that ended on its list: 60 s after its last
/// check-in (`cl-bundle-manager --worker-timeout-seconds`' default). A `cl-worker` never
/// checks out, so one that exits stays listed, and the server offers it bundles meanwhile:
/// each round that does (about 9 s apart, each offer timing out) starts nothing, though live
/// workers with room are checking in (the bundle manager's log, BENCH.md's `advise` section).
/// The `advise` replay models it ([`crate::simulate::SimConfig::ghost`]); the manager leaves
/// such a worker's room out where its pool's workers outlive the listing
/// ([`outlives_the_listing`]).
pub const SERVER_FORGETS_AFTER: Duration = Duration::from_secs(60);

/// Whether a worker that waits `idle_seconds` for a run before it exits, launched once
/// another has exited, is still up when the server forgets that one ([`SERVER_FORGETS_AFTER`]):
/// then the manager launches for the bundles the listed worker would be offered at once, and
/// the new worker takes them once it is forgotten. A worker that idles out sooner would exit
/// unused (the server offers the listed one every bundle first) and be listed in its turn:
/// the `advise` bench of 2026-11-30 ran so at 30 s, and 5 of its 12 workers ran nothing. So
/// for such a pool a listed worker's room is counted, as the server counts it, until it is
/// forgotten, and the launch comes then.
pub fn outlives_the_listing(idle_seconds: u64) -> bool {
    Duration::from_secs(idle_seconds) >= SERVER_FORGETS_AFTER
}

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
    /// The id of the user who runs it (`codalab`'s id: a shared worker). The fields below are
    /// read for [`crate::dispatch`]; each is `None` when the server left it out or sent a value
    /// of another type, so that an odd field never costs the check-ins.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub user_id: Option<String>,
    /// Its `--tag`, when it has one.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub tag: Option<String>,
    /// It runs only bundles that ask for its tag (`--tag-exclusive`).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub tag_exclusive: Option<bool>,
    /// The CPUs it may use (cl-worker reports its cpuset: a Slurm job's allocation).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpus: Option<u32>,
    /// The GPUs it may use.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub gpus: Option<u32>,
    /// The memory it may give its runs, in bytes.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub memory_bytes: Option<u64>,
    /// The sum of its runs' `request_cpus`, as the server computes it for this reply.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpus_in_use: Option<u32>,
    /// The sum of its runs' `request_gpus`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub gpus_in_use: Option<u32>,
    /// Runs it will still start before it exits (`--exit-after-num-runs` less those started).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub exit_after_num_runs: Option<i64>,
}

/// A field read as `T` when it is one, `None` when it is anything else (`null`, a string …).
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).ok())
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

/// The launch unique `job`'s id or name ends with (the id's first: on some platforms only
/// the name carries it).
pub(crate) fn unique_of(job: &crate::backend::WorkerJob) -> Option<&str> {
    launch_unique(&job.id).or_else(|| launch_unique(&job.name))
}

/// The server's workers, by the launch unique their id ends with (others are left out).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckinView {
    /// Index in `workers` of each worker whose id ends in a launch unique.
    by_unique: FxHashMap<String, usize>,
    workers: Vec<CheckedInWorker>,
}

impl CheckinView {
    /// The view of `workers` as the server listed them.
    pub fn new(workers: Vec<CheckedInWorker>) -> Self {
        let by_unique = workers
            .iter()
            .enumerate()
            .filter_map(|(i, w)| Some((launch_unique(&w.worker_id)?.to_owned(), i)))
            .collect();
        Self { by_unique, workers }
    }

    /// Every worker the server listed, whoever started it.
    pub fn workers(&self) -> &[CheckedInWorker] {
        &self.workers
    }

    /// The worker of the job with platform id `id` and name `name`, if it has checked in.
    pub fn worker_of(&self, id: &str, name: &str) -> Option<&CheckedInWorker> {
        [id, name]
            .into_iter()
            .filter_map(launch_unique)
            .find_map(|unique| self.by_unique.get(unique).map(|&i| &self.workers[i]))
    }

    /// Whether the view lists a worker whose id ends in launch unique `unique`.
    pub fn lists(&self, unique: &str) -> bool {
        self.by_unique.contains_key(unique)
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
    /// Nothing: no view of the server's workers yet, a view that is not this tick's and does
    /// not list the job's worker (which never checked in), or a job whose id and name carry no
    /// launch unique (its check-in cannot be matched). Judged by the platform state alone.
    #[default]
    Unknown,
    /// The server lists the job's worker (in this tick's view, or in the last one when the
    /// call failed since).
    CheckedIn {
        /// Bundles it runs.
        runs: usize,
        /// It is shutting down.
        terminating: bool,
    },
    /// This tick's view does not list the job's worker, and it never checked in.
    NotYet {
        /// How long it has gone unlisted while running: counted on the manager clock over the
        /// current run of fresh views only, from the later of when the job became active and
        /// when the views became fresh; zero while the job is pending.
        unseen_for: Duration,
    },
    /// The view does not list the job's worker, which checked in before. Such a worker
    /// is never judged lost: the server may have dropped it for a network partition or a
    /// cl-worker nap, and its bundles resume when it checks in again.
    Vanished {
        /// How long it has gone unlisted (as [`JobCheckin::NotYet`] counts it).
        unseen_for: Duration,
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
    /// Checked in before, no longer listed by the server: presumed busy (its bundles wait as
    /// `worker_offline` and resume when it checks in again); never stopped by the manager.
    Vanished,
    /// Running on the platform, never checked in, for longer than the timeout over fresh
    /// views.
    Lost,
}

impl WorkerState {
    /// Every state, in display order.
    pub const ALL: [WorkerState; 5] = [
        WorkerState::Starting,
        WorkerState::ReadyIdle,
        WorkerState::Busy,
        WorkerState::Vanished,
        WorkerState::Lost,
    ];

    /// The machine-readable name (`starting`, `ready_idle`, `busy`, `vanished`, `lost`).
    pub fn code(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::ReadyIdle => "ready_idle",
            WorkerState::Busy => "busy",
            WorkerState::Vanished => "vanished",
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
/// Only a job that never checked in can be [`WorkerState::Lost`].
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
        JobCheckin::Vanished { .. } => Some(WorkerState::Vanished),
        JobCheckin::NotYet { unseen_for } if state == JobState::Active && unseen_for > timeout => {
            Some(WorkerState::Lost)
        }
        JobCheckin::NotYet { .. } => Some(WorkerState::Starting),
    }
}

/// How long a running job has gone unlisted, on the manager clock: since the latest of when it
/// became active, when its worker was last listed, and when the views became fresh (time
/// without a view is never time without a check-in).
pub fn unseen_for(now: Duration, times: JobTimes, fresh_since: Duration) -> Duration {
    let since = [times.active_since, times.last_seen, Some(fresh_since)]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(now);
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
    /// When the current run of fresh views began (manager clock): after a call failed, or
    /// when no call was made, the next fresh view starts a new run, and every job's clock
    /// starts again from it.
    pub fresh_since: Duration,
}

/// What the manager remembers of one job (manager clock).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobTimes {
    /// When the job's worker container started: when the platform first said the job runs.
    pub active_since: Option<Duration>,
    /// When the server last listed the job's worker, in this process.
    pub last_seen: Option<Duration>,
    /// The job's worker checked in at some point (this process saw it, or the manager's
    /// launch record says so from before a restart).
    pub checked_in: bool,
}

/// What `sighting` says of the job with platform `id`, `name` and `state` at manager time
/// `now`. `None` (no view yet), jobs without a launch unique, and a stale view that does not
/// list a job that never checked in give [`JobCheckin::Unknown`]; a job that checked in once
/// and is not listed is [`JobCheckin::Vanished`], whatever the view.
pub fn job_checkin(
    sighting: Option<Sighting<'_>>,
    (id, name, state): (&str, &str, JobState),
    times: JobTimes,
    now: Duration,
) -> JobCheckin {
    let Some(Sighting {
        view,
        fresh,
        fresh_since,
    }) = sighting
    else {
        return JobCheckin::Unknown;
    };
    if launch_unique(id).or_else(|| launch_unique(name)).is_none() {
        return JobCheckin::Unknown;
    }
    if let Some(worker) = view.worker_of(id, name) {
        return JobCheckin::CheckedIn {
            runs: worker.run_uuids.len(),
            terminating: worker.is_terminating,
        };
    }
    let unseen_for = match state {
        JobState::Active => unseen_for(now, times, fresh_since),
        _ => Duration::ZERO,
    };
    match (times.checked_in || times.last_seen.is_some(), fresh) {
        // Whatever the view, a worker that checked in once stays one.
        (true, _) => JobCheckin::Vanished { unseen_for },
        (false, true) => JobCheckin::NotYet { unseen_for },
        (false, false) => JobCheckin::Unknown,
    }
}

#[cfg(test)]
mod tests;
