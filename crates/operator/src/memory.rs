//! What the operator remembers of a pool's workers between reconciles, so that it judges a
//! worker pod lost exactly as core's manager judges a job: only a pod whose worker never
//! checked in, counted only over an unbroken run of successful worker-list reads, from when
//! the pod was first seen running (not from its creation: a pod that waited minutes for an
//! autoscaled node has just started).
//!
//! Two kinds of memory, each on the safe side of a change of leader:
//! - **in the pool's status** ([`Remembered`]): which pods' workers have checked in, and
//!   whether any worker of the pool ever did. A new leader reads them, so it never judges a
//!   worker that checked in, and never stops pods while it cannot see check-ins at all.
//! - **in this process** ([`Clocks`]): when the current run of successful reads began, and
//!   when each pod was first seen running. A new leader (or a restart) starts every clock
//!   again: its verdicts come later, never earlier. Clocks compare times taken by this
//!   process only, never the API server's timestamps. Beside them, the pods this process
//!   has seen checked in, merged with the status' list at every reconcile (review
//!   2026-11-27 §15): a status write that failed, or a reconcile that starts from a cached
//!   object older than the last write, never makes a checked-in pod look never checked in.
//!   A new leader starts without it and falls back to the status.

use codalab_wm_core::backend::{JobState, WorkerJob};
use codalab_wm_core::checkin::JobCheckin;
use codalab_wm_core::pools::PoolObservation;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// The memory kept in the pool's status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Remembered {
    /// The pool's pods whose worker has checked in (only pods that still exist).
    pub checked_in: BTreeSet<String>,
    /// Some worker of the pool has checked in with its server (the manager can see them).
    pub workers_seen: bool,
}

impl Remembered {
    /// The memory after `observation` of `jobs`: pods listed checked in now are added, pods
    /// that are gone are dropped.
    pub fn after(&self, jobs: &[WorkerJob], observation: &PoolObservation) -> Self {
        let now: Vec<&str> = observation
            .jobs
            .iter()
            .filter(|j| matches!(j.checkin, JobCheckin::CheckedIn { .. }))
            .map(|j| j.id.as_str())
            .collect();
        let present = |id: &String| jobs.iter().any(|j| j.id == *id);
        let mut checked_in: BTreeSet<String> = self
            .checked_in
            .iter()
            .filter(|id| present(id))
            .cloned()
            .collect();
        checked_in.extend(now.iter().map(|id| (*id).to_owned()));
        Self {
            checked_in,
            workers_seen: self.workers_seen || !now.is_empty(),
        }
    }
}

/// The clocks this process keeps for one pool (core's clock: time since the epoch, as taken
/// by this process).
#[derive(Debug, Clone, Default)]
pub struct Clocks {
    /// The current run of successful worker-list reads: when it began, when the last was.
    fresh: Option<(Duration, Duration)>,
    /// When each pod was first seen running.
    running_since: HashMap<String, Duration>,
    /// The pods whose worker this process has seen checked in (pods that still exist).
    checked_in: BTreeSet<String>,
}

impl Clocks {
    /// Notes this reconcile's worker-list read at `now` (`ok`: it succeeded) and returns
    /// when the current run of fresh reads began. A failed read, or a gap longer than `gap`
    /// since the last read (reconciles that did not happen: a restart, a lost lease, a clock
    /// that jumped), ends the run: the next successful read starts a new one.
    pub fn read(&mut self, ok: bool, now: Duration, gap: Duration) -> Option<Duration> {
        if !ok {
            self.fresh = None;
            return None;
        }
        let since = match self.fresh {
            Some((since, last)) if now >= last && now - last <= gap => since,
            _ => now,
        };
        self.fresh = Some((since, now));
        Some(since)
    }

    /// The pods whose worker this process has seen checked in.
    pub fn checked_in(&self) -> &BTreeSet<String> {
        &self.checked_in
    }

    /// Remembers `memory`'s checked-in pods (the memory after a reconcile: pods that are
    /// gone are already dropped from it), whatever becomes of the status write.
    pub fn remember(&mut self, memory: &Remembered) {
        self.checked_in.clone_from(&memory.checked_in);
    }

    /// Notes which of `jobs` run at `now`, forgets pods that are gone, and returns when
    /// each running pod was first seen running.
    pub fn running(&mut self, jobs: &[WorkerJob], now: Duration) -> &HashMap<String, Duration> {
        self.running_since.retain(|id, _| {
            jobs.iter()
                .any(|j| j.id == *id && j.state == JobState::Active)
        });
        for job in jobs.iter().filter(|j| j.state == JobState::Active) {
            self.running_since.entry(job.id.clone()).or_insert(now);
        }
        &self.running_since
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_core::pools::ObservedJob;

    const GAP: Duration = Duration::from_secs(15);

    fn s(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn a_run_of_fresh_reads_begins_after_a_failed_read_or_a_gap() {
        // (read ok, at) → the run's start
        let steps: [(bool, u64, Option<u64>); 7] = [
            (true, 100, Some(100)),
            (true, 105, Some(100)),
            (true, 115, Some(100)),
            (false, 120, None),
            (true, 125, Some(125)),
            (true, 200, Some(200)), // 75 s without a reconcile: a new run
            (true, 190, Some(190)), // the clock went back: a new run
        ];
        let mut clocks = Clocks::default();
        for (ok, at, since) in steps {
            assert_eq!(clocks.read(ok, s(at), GAP), since.map(s), "at {at}");
        }
    }

    #[test]
    fn running_since_is_when_a_pod_was_first_seen_running() {
        let mut clocks = Clocks::default();
        let pending = [WorkerJob::new("a", JobState::Pending)];
        let running = [WorkerJob::new("a", JobState::Active)];
        assert!(clocks.running(&pending, s(10)).is_empty());
        assert_eq!(clocks.running(&running, s(400))["a"], s(400));
        assert_eq!(clocks.running(&running, s(405))["a"], s(400));
        assert!(clocks.running(&[], s(410)).is_empty(), "gone: forgotten");
    }

    #[test]
    fn this_process_keeps_what_it_last_remembered() {
        let mut clocks = Clocks::default();
        assert!(clocks.checked_in().is_empty());
        let memory = Remembered {
            checked_in: ["a".to_owned()].into(),
            workers_seen: true,
        };
        clocks.remember(&memory);
        assert_eq!(clocks.checked_in(), &memory.checked_in);
        clocks.remember(&Remembered::default());
        assert!(clocks.checked_in().is_empty(), "gone pods are dropped");
    }

    #[test]
    fn check_ins_are_kept_while_their_pods_exist() {
        let job = |id: &str| WorkerJob::new(id, JobState::Active);
        let observed = |id: &str, checkin| ObservedJob {
            checkin,
            ..ObservedJob::new(id.to_owned(), JobState::Active, s(0), s(0))
        };
        let observation = PoolObservation {
            jobs: vec![
                observed(
                    "a",
                    JobCheckin::CheckedIn {
                        runs: 1,
                        terminating: false,
                    },
                ),
                observed("b", JobCheckin::NotYet { unseen_for: s(1) }),
            ],
            ..PoolObservation::default()
        };
        let old = Remembered {
            checked_in: ["gone".to_owned(), "c".to_owned()].into(),
            workers_seen: false,
        };
        let new = old.after(&[job("a"), job("b"), job("c")], &observation);
        assert_eq!(new.checked_in, ["a".to_owned(), "c".to_owned()].into());
        assert!(new.workers_seen);
        let none = PoolObservation::default();
        assert!(!Remembered::default().after(&[job("b")], &none).workers_seen);
    }
}
