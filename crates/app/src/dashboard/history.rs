//! The dashboard's memory: tick summaries in one-minute buckets over the last six hours, and the
//! last decisions with their reasons, built from the status snapshots the manager publishes.
//!
//! ## What it costs
//! A bucket is a fixed-size [`Bucket`] (48 bytes: its minute and ten counts, whatever the
//! number of pools), so an hour of history is 60 × 48 B ≈ 2.9 KB and the whole window of
//! [`BUCKETS`] buckets (6 hours) at most ≈ 17 KB, allocated once. The decisions are at most
//! [`DECISIONS`] records of a pool name and at most [`MAX_REASONS`] reason texts, each cut at
//! [`MAX_TEXT`] bytes: at most ≈ 37 KB, typically ~ 3 KB (a few reasons of ~ 60 bytes). Nothing
//! else grows with uptime.

pub use crate::present::{DecisionRecord, MAX_REASONS, MAX_TEXT};
use codalab_wm_core::checkin::WorkerState;
use codalab_wm_core::status::{Counter, Status};
use std::collections::VecDeque;

/// Seconds summarised by one bucket.
pub const BUCKET_SECONDS: u64 = 60;
/// Buckets kept: six hours of one-minute buckets.
pub const BUCKETS: usize = 6 * 60;
/// Decisions kept.
pub const DECISIONS: usize = 15;

/// One minute of ticks, summed over every pool. Counts of workers and staged bundles are the
/// last tick's in the minute (a level); launches and failures are the minute's sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bucket {
    /// The minute (manager clock: seconds since the manager started / [`BUCKET_SECONDS`]).
    pub minute: u64,
    /// Staged bundles seen.
    pub staged: u32,
    /// Jobs pending on the platform.
    pub pending: u32,
    /// Jobs starting (pending, or running and not checked in yet).
    pub starting: u32,
    /// Workers checked in and idle.
    pub ready: u32,
    /// Workers running bundles.
    pub busy: u32,
    /// Workers that checked in, then left the server's list (presumed busy, never stopped).
    pub vanished: u32,
    /// Workers lost (running, no check-in).
    pub lost: u32,
    /// Active jobs on the platform.
    pub active: u32,
    /// Workers launched in the minute.
    pub launches: u32,
    /// Failed launches and jobs that failed before they became active, in the minute.
    pub failures: u32,
}

impl DecisionRecord {
    /// The same decision: what it does and the rules that fired (not their changing figures,
    /// such as the seconds waited).
    fn same(&self, other: &Self) -> bool {
        let codes = |r: &Self| r.reasons.iter().map(|(c, _)| *c).collect::<Vec<_>>();
        (
            &self.pool,
            self.launches,
            self.stops,
            self.target,
            codes(self),
        ) == (
            &other.pool,
            other.launches,
            other.stops,
            other.target,
            codes(other),
        )
    }
}

/// The dashboard's history (see the module doc for its bounds).
#[derive(Debug, Clone)]
pub struct History {
    buckets: VecDeque<Bucket>,
    decisions: VecDeque<DecisionRecord>,
    /// The running totals `(launches, failures)` at the last snapshot taken in.
    totals: Option<(u64, u64)>,
    /// The last tick taken in.
    last_tick: u64,
}

impl Default for History {
    fn default() -> Self {
        Self {
            buckets: VecDeque::with_capacity(BUCKETS),
            decisions: VecDeque::with_capacity(DECISIONS),
            totals: None,
            last_tick: 0,
        }
    }
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes in a snapshot. A snapshot of a tick already taken in (or of no tick) changes
    /// nothing.
    pub fn observe(&mut self, status: &Status) {
        if status.ticks == 0 || status.ticks == self.last_tick {
            return;
        }
        self.last_tick = status.ticks;
        let totals = launch_totals(&status.counters);
        let (launches, failures) = match self.totals.replace(totals) {
            Some(before) => (
                totals.0.saturating_sub(before.0),
                totals.1.saturating_sub(before.1),
            ),
            None => totals,
        };
        let bucket = self.bucket_at(status.uptime_seconds / BUCKET_SECONDS);
        *bucket = Bucket {
            launches: bucket.launches.saturating_add(clamp(launches)),
            failures: bucket.failures.saturating_add(clamp(failures)),
            ..levels(status, bucket.minute)
        };
        self.note_decisions(status);
    }

    /// The bucket of `minute`, started (and the window moved on) if it is new.
    fn bucket_at(&mut self, minute: u64) -> &mut Bucket {
        if self.buckets.back().is_none_or(|b| b.minute < minute) {
            self.buckets.push_back(Bucket {
                minute,
                ..Bucket::default()
            });
        }
        while self
            .buckets
            .front()
            .is_some_and(|b| b.minute + BUCKETS as u64 <= minute)
        {
            self.buckets.pop_front();
        }
        self.buckets.back_mut().expect("a bucket was just pushed")
    }

    fn note_decisions(&mut self, status: &Status) {
        for record in DecisionRecord::last_tick(status) {
            let at = record.last_seconds;
            let previous = self
                .decisions
                .iter_mut()
                .rev()
                .find(|d| d.pool == record.pool);
            match previous {
                Some(previous) if previous.same(&record) => {
                    previous.last_seconds = at;
                    previous.reasons = record.reasons;
                }
                _ => {
                    if self.decisions.len() == DECISIONS {
                        self.decisions.pop_front();
                    }
                    self.decisions.push_back(record);
                }
            }
        }
    }

    /// The buckets, oldest first (at most [`BUCKETS`], covering at most six hours).
    pub fn buckets(&self) -> impl ExactSizeIterator<Item = &Bucket> + DoubleEndedIterator {
        self.buckets.iter()
    }

    /// The decisions, oldest first (at most [`DECISIONS`]).
    pub fn decisions(
        &self,
    ) -> impl ExactSizeIterator<Item = &DecisionRecord> + DoubleEndedIterator {
        self.decisions.iter()
    }
}

/// The running totals of launches started and of failures (refused launches, and jobs that
/// failed before they became active) in the snapshot's counters.
fn launch_totals(counters: &[Counter]) -> (u64, u64) {
    let sum = |keep: &dyn Fn(&Counter) -> bool| {
        counters.iter().filter(|c| keep(c)).map(|c| c.value).sum()
    };
    (
        sum(&|c| c.metric == "launches" && c.label == "started"),
        sum(&|c| {
            (c.metric == "launches" && c.label == "failed")
                || (c.metric == "job_failures" && c.label == "before_active")
        }),
    )
}

/// The levels of a snapshot (workers by state, staged) summed over the pools.
fn levels(status: &Status, minute: u64) -> Bucket {
    let mut bucket = Bucket {
        minute,
        staged: clamp(status.staged as u64),
        ..Bucket::default()
    };
    for pool in &status.pools {
        let state = |s: WorkerState| clamp(pool.workers.get(&s).copied().unwrap_or(0) as u64);
        bucket.pending = bucket.pending.saturating_add(clamp(pool.pending as u64));
        bucket.active = bucket.active.saturating_add(clamp(pool.active as u64));
        bucket.starting = bucket.starting.saturating_add(state(WorkerState::Starting));
        bucket.ready = bucket.ready.saturating_add(state(WorkerState::ReadyIdle));
        bucket.busy = bucket.busy.saturating_add(state(WorkerState::Busy));
        bucket.vanished = bucket.vanished.saturating_add(state(WorkerState::Vanished));
        bucket.lost = bucket.lost.saturating_add(state(WorkerState::Lost));
    }
    bucket
}

fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
