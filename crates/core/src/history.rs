//! The manager's history: a bounded, rolling record of what its queue did and what it decided,
//! kept in `<record-dir>/history/` for `cl-worker-manager advise` to replay (and readable as a
//! `simulate --trace` input as it is).
//!
//! One JSON object per line, one file per UTC day (`2026-11-30.jsonl`). Every line has a
//! `kind` and a `time` (seconds since the Unix epoch):
//!
//! - `bundle`: a run that ended (or was killed after it started), written once its end is
//!   known. `time` is when it was staged, then the trace's own keys (`cpus`, `gpus`, `memory`
//!   in bytes, `queue`, `owner`, `duration`: seconds from its start on a worker to its end),
//!   and `uuid`, `wait` (staged → started on a worker), `pool` (the pool whose worker ran it,
//!   empty for another worker), `state` (ready, failed, killed). The times are the server's
//!   (`created`, `started`, `last_updated`, read once the run has left the workers), so they
//!   do not depend on the tick;
//! - `worker`: a job of a pool that left its platform's listing: `time` when it was launched
//!   (first listed, or the platform's submit time), `pool`, `job`, `placed` (launch → running on
//!   the platform, seconds), `checked_in` (launch → its worker's first check-in), `active`
//!   (seconds running, what a cloud bills), `runs` (bundles its worker ran), `end` (`gone`,
//!   `failed`, `preempted`);
//! - `event`: what happened to a pool's capacity or spending: `pool`, `event` (the event kind:
//!   `capacity_switched`, `worker_preempted`, `launch_failed`, `pool_suspended`, `budget_reached`,
//!   …) and `detail`;
//! - `decision`: a pool's decision, when it changed: `pool`, `launch`, `stop`, `reasons` (codes);
//! - `settings`: the settings in force, at start and at each reload: `sleep_time` and the
//!   pools' policies (as the reload's log prints them), each with its `name` and `worker`: what
//!   one of its workers offers (`cpus`, `gpus`, `memory_bytes`; `advise` replays the workers
//!   so);
//! - `unmodelled`: a bundle the history could not follow to the end, and `why` (deleted,
//!   killed before it ran, its run could not be read).
//!
//! Nothing in it is a secret: bundle uuids, shapes and owners (as the server reports them),
//! pool names, job ids, times, reason codes. It is bounded by age (`history_days`, default
//! 14: older days' files are deleted) and size (`history_max_mb`: the oldest days go first; a
//! day that alone exceeds it stops being written until the next). It is written by a thread of
//! its own, fed through a bounded queue: a slow disk drops lines (counted in the log), it
//! never slows a tick.

mod file;
#[cfg(test)]
mod tests;
mod track;

pub use file::{HistoryLimits, HistorySink, read, read_dir};
pub use track::{LOOKUPS_PER_TICK, MAX_FOLLOWED, RunInfo, Tracker};

use serde::{Deserialize, Serialize};

/// One line of the history (see the module doc).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    /// A run that ended.
    Bundle(BundleLine),
    /// A job that left its platform's listing.
    Worker(WorkerLine),
    /// Something that happened to a pool's capacity or spending.
    Event(EventLine),
    /// A pool's decision, when it changed.
    Decision(DecisionLine),
    /// The settings in force.
    Settings(SettingsLine),
    /// A bundle the history could not follow to its end.
    Unmodelled(UnmodelledLine),
}

impl Line {
    /// Its `time`, seconds since the Unix epoch.
    pub fn time(&self) -> f64 {
        match self {
            Line::Bundle(l) => l.time,
            Line::Worker(l) => l.time,
            Line::Event(l) => l.time,
            Line::Decision(l) => l.time,
            Line::Settings(l) => l.time,
            Line::Unmodelled(l) => l.time,
        }
    }

    /// When what it records was over, seconds since the Unix epoch: a run's end (staged, then
    /// its wait and its run), a worker job's (launched, then placed and active on the
    /// platform); any other line's `time`.
    pub fn ended(&self) -> f64 {
        match self {
            Line::Bundle(l) => l.time + l.wait.max(0.0) + l.duration,
            Line::Worker(l) => l.time + l.placed.unwrap_or(0.0) + l.active,
            line => line.time(),
        }
    }
}

/// A run that ended: the trace's keys, and what happened to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundleLine {
    /// When it was staged.
    pub time: f64,
    /// The bundle.
    pub uuid: String,
    /// CPUs requested.
    pub cpus: u32,
    /// GPUs requested.
    pub gpus: u32,
    /// Memory requested, bytes.
    pub memory: u64,
    /// Its `request_queue`.
    pub queue: String,
    /// Its owner, as the server reports it.
    pub owner: String,
    /// Seconds from its start on a worker to its end.
    pub duration: f64,
    /// Seconds from staged to its start on a worker.
    pub wait: f64,
    /// The pool whose worker ran it ("": a worker of no pool of this manager).
    pub pool: String,
    /// How it ended (`ready`, `failed`, `killed`).
    pub state: String,
}

/// A job that left its platform's listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerLine {
    /// When it was launched.
    pub time: f64,
    /// Its pool.
    pub pool: String,
    /// The platform's id.
    pub job: String,
    /// Seconds from launch to running on the platform (none: it never ran).
    pub placed: Option<f64>,
    /// Seconds from launch to its worker's first check-in (none: it never checked in).
    pub checked_in: Option<f64>,
    /// Seconds it ran on the platform.
    pub active: f64,
    /// Bundles its worker ran.
    pub runs: u32,
    /// How it left: `gone` (exited, stopped or withdrawn), `failed`, `preempted`.
    pub end: String,
}

/// Something that happened to a pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventLine {
    /// When.
    pub time: f64,
    /// The pool (or `all pools` for the overall budget).
    pub pool: String,
    /// The event's kind.
    pub event: String,
    /// What the manager said of it.
    pub detail: String,
}

/// A pool's decision, when it changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionLine {
    /// When.
    pub time: f64,
    /// The pool.
    pub pool: String,
    /// Launches decided.
    pub launch: u32,
    /// Stops decided.
    pub stop: u32,
    /// The reasons' codes.
    pub reasons: Vec<String>,
}

/// The settings in force from `time` on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingsLine {
    /// Since when.
    pub time: f64,
    /// Seconds between ticks.
    pub sleep_time: f64,
    /// The pools' policies, in declaration order (`PoolPolicy`'s serialization).
    pub pools: Vec<serde_json::Value>,
}

impl SettingsLine {
    /// A pool as the line writes it: its policy (as the reload's log prints it), its `name` and
    /// its `worker` ([`SettingsWorker`]).
    pub fn pool(policy: &crate::pools::PoolPolicy) -> serde_json::Value {
        let mut pool = serde_json::to_value(policy).unwrap_or_default();
        if let Some(pool) = pool.as_object_mut() {
            pool.insert("name".into(), policy.name.clone().into());
            let worker = serde_json::to_value(SettingsWorker::of(policy.shape));
            pool.insert("worker".into(), worker.unwrap_or_default());
        }
        pool
    }
}

/// What one worker of a pool offers, in a `settings` line's pool (its `worker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsWorker {
    /// CPUs.
    pub cpus: u32,
    /// GPUs.
    pub gpus: u32,
    /// Memory, bytes.
    pub memory_bytes: u64,
}

impl SettingsWorker {
    /// A pool's worker shape as the line writes it.
    pub fn of(shape: crate::bundle::WorkerShape) -> Self {
        Self {
            cpus: shape.cpus,
            gpus: shape.gpus,
            memory_bytes: shape.memory_bytes,
        }
    }

    /// The worker shape it writes.
    pub fn shape(self) -> crate::bundle::WorkerShape {
        crate::bundle::WorkerShape {
            cpus: self.cpus,
            gpus: self.gpus,
            memory_bytes: self.memory_bytes,
        }
    }
}

/// A bundle the history could not follow to its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnmodelledLine {
    /// When it was given up.
    pub time: f64,
    /// The bundle.
    pub uuid: String,
    /// Why.
    pub why: String,
}
