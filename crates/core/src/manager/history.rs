//! The manager's side of its history ([`crate::history`]): each tick hands the tracker what it
//! listed, the server's workers, the staged bundles read and the decisions and events, looks up
//! the runs that left the workers (one search by uuid, at most
//! [`LOOKUPS_PER_TICK`](crate::history::LOOKUPS_PER_TICK) a tick, within [`LOOKUP_BUDGET`]), and queues the
//! lines for the history's writer thread.

use super::Manager;
use crate::backend::WorkerJob;
use crate::error::Result;
use crate::history::{HistoryLimits, HistorySink, Tracker};
use crate::pools::PoolsDecision;
use std::path::Path;
use std::time::Duration;

/// The time a tick gives the lookup of ended runs (a slow server cannot stall the tick
/// longer; what is not read is looked up later).
pub const LOOKUP_BUDGET: Duration = Duration::from_secs(10);

/// How long the manager waits at its end for the history's last lines to be written.
const FLUSH_BOUND: Duration = Duration::from_secs(5);

/// The history the manager keeps.
#[derive(Debug)]
pub(super) struct History {
    tracker: Tracker,
    sink: HistorySink,
}

impl Manager {
    /// Keeps the history of this manager's queue in `dir` (one file per UTC day, bounded by
    /// `limits`), for `cl-worker-manager advise`. Fails when `dir` cannot be created or read.
    /// A dry run keeps none, nor does a manager whose `dir` another process writes (said in
    /// the log).
    pub fn keep_history(&mut self, dir: &Path, limits: HistoryLimits) -> Result<()> {
        if self.config.dry_run {
            return Ok(());
        }
        let Some(sink) = HistorySink::start(dir, limits)? else {
            // Not a warning: managers of other pools may share a record dir (their launch
            // records are apart); only the first keeps the history there.
            tracing::info!(dir = %dir.display(), "another manager keeps its history in {}: this one keeps none (give it a record_dir of its own for `advise`)", dir.display());
            return Ok(());
        };
        tracing::info!(dir = %dir.display(), days = limits.days, max_mb = limits.max_bytes >> 20, "history of the queue kept in {} (`advise` reads it)", dir.display());
        let mut tracker = Tracker::default();
        let now = self.unix_now(self.clock());
        tracker.settings(now, self.config.sleep_time.as_secs_f64(), &self.policies());
        sink.send(tracker.take_lines());
        self.journal.keep_for_history();
        self.history = Some(History { tracker, sink });
        Ok(())
    }

    /// The settings in force changed (a reload).
    pub(super) fn history_settings(&mut self) {
        if self.history.is_none() {
            return;
        }
        let now = self.unix_now(self.clock());
        let (sleep, policies) = (self.config.sleep_time.as_secs_f64(), self.policies());
        if let Some(history) = &mut self.history {
            history.tracker.settings(now, sleep, &policies);
        }
    }

    /// Pool `index` listed `jobs` at `now` (manager clock).
    pub(super) fn history_listed(&mut self, index: usize, jobs: &[WorkerJob], now: Duration) {
        let unix = self.unix_now(now);
        let pool = self.engine.pools[index].name();
        if let Some(history) = &mut self.history {
            history.tracker.listed(pool, jobs, unix);
        }
    }

    /// The tick's reads are in (`fresh`: the server's workers were listed this tick): the
    /// workers and the staged bundles to the tracker, then the runs that left the workers
    /// looked up.
    pub(super) async fn history_observed(
        &mut self,
        staged: &[crate::bundle::StagedBundle],
        complete: bool,
        fresh: bool,
        now: Duration,
    ) {
        let unix = self.unix_now(now);
        let Some(history) = &mut self.history else {
            return;
        };
        if fresh {
            let workers = self.engine.checkin_workers().unwrap_or_default();
            history.tracker.workers(workers, unix);
        }
        history.tracker.staged(staged, complete, unix);
        if !fresh {
            return;
        }
        let uuids = history.tracker.to_look_up(unix);
        if uuids.is_empty() {
            return;
        }
        let found = match tokio::time::timeout(LOOKUP_BUDGET, self.client.runs_of(&uuids)).await {
            Ok(Ok(runs)) => Ok(runs),
            Ok(Err(error)) => {
                tracing::debug!(%error, "cannot read the runs that left the workers, for the history; they are looked up later");
                Err(())
            }
            Err(_) => Err(()),
        };
        history.tracker.looked_up(&uuids, found, unix);
    }

    /// The tick is over: its decisions and events to the tracker, and every line made this
    /// tick to the writer.
    pub(super) fn history_ticked(&mut self, decision: Option<&PoolsDecision>, now: Duration) {
        let unix = self.unix_now(now);
        let events = self.journal.take_for_history();
        let Some(history) = &mut self.history else {
            return;
        };
        if let Some(decision) = decision {
            history.tracker.decided(decision, unix);
        }
        for event in events {
            let pool = event.kind.pool().unwrap_or_default();
            let time = event.unix_seconds as f64;
            (history.tracker).event(time, pool, event.kind.code(), &event.message);
        }
        history.sink.send(history.tracker.take_lines());
    }

    /// Waits (at most [`FLUSH_BOUND`]) until the history's lines are written.
    pub(super) fn history_flush(&self) {
        if let Some(history) = &self.history
            && !history.sink.flush(FLUSH_BOUND)
        {
            tracing::warn!(dir = %history.sink.dir().display(), "the history's last lines could not be written in time");
        }
    }

    /// The manager clock's `now` in seconds since the Unix epoch (as the events say it).
    fn unix_now(&self, now: Duration) -> f64 {
        self.journal.started_unix() as f64 + now.as_secs_f64()
    }
}
