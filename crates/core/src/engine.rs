//! The tick engine: what a tick remembers between ticks and every rule it applies, as
//! synchronous steps with the time passed in (quinn-proto's shape). The engine calls no backend
//! and no server: a driver lists the pools, reads the server, submits and stops jobs, and
//! hands the engine what came back. Its one write is each pool's launch record (`record.rs`: a
//! write-ahead file when the manager keeps records, memory otherwise), made before a submit. Two drivers run it, so what a tick does is written once:
//! [`Manager`](crate::manager::Manager) (the backends, the CodaLab server, the launch records on
//! disk) and the simulator (`crate::simulate`: its simulated platforms and server).
//!
//! A tick, as a driver runs it:
//! 1. **observe**: [`Engine::listed`] takes each pool's listing; [`Engine::take_checkins`] the
//!    server's worker list (or that it could not be read); [`Engine::observe`] gives the pure
//!    [`PoolsObservation`], into which the driver reads the staged bundles the pools can
//!    absorb ([`Engine::need`]);
//! 2. **plan** ([`Engine::plan`]): the budgets, the pool policy, the server memory, the
//!    start-time estimates;
//! 3. **act**, pool by pool (`act.rs`): [`Engine::note_kept`]; the stops the decision names,
//!    then [`Engine::stopped`]; each launch between [`Engine::launching`] and
//!    [`Engine::launch_result`]; then [`Engine::decided`] and [`Engine::launched_for_overdue`].
//!
//! Its memory: per pool a [`PoolRuntime`] (`runtime.rs`: the listing, launch record,
//! check-ins, backoff, capacity state, budget use), the last view of the server's workers
//! (`checkins.rs`), the dispatch model's placements (`server_view.rs`), what the estimates
//! learned (`estimates.rs`), the budgets' states (`budgets.rs`) and the recent failures.

use crate::backend::{JobState, PendingKind, WorkerJob};
use crate::budget::{BudgetLimits, BudgetStatus};
use crate::checkin::{CheckedInWorker, CheckinView, outlives_the_listing};
use crate::codalab::UserIdentity;
use crate::pools::{Need, PoolPolicy, PoolsObservation};
use crate::status::{FailureRecord, TickEvent};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;
use std::time::{Duration, UNIX_EPOCH};

mod act;
mod budgets;
mod capacity;
pub(crate) mod checkins;
pub mod estimates;
mod hedges;
mod plan;
pub(crate) mod record;
pub(crate) mod runtime;
pub mod server_view;
mod suspension;

pub(crate) use runtime::PoolSpec;

use checkins::LastView;
use estimates::EstimateMemory;
use runtime::{ListingNews, PoolRuntime};
use server_view::ServerMemory;

/// The tick's memory and its steps (see the module doc).
#[derive(Debug)]
pub(crate) struct Engine {
    /// The pools, in declaration order.
    pub pools: Vec<PoolRuntime>,
    /// The last view of the server's workers.
    checkins: LastView,
    /// The dispatch model's placements on checked-in workers, between ticks.
    server: ServerMemory,
    /// What the start-time estimates learned, and their predictions.
    estimates: EstimateMemory,
    /// The budget over all pools.
    budget: BudgetLimits,
    /// Each budget's state, as of the last plan.
    budgets: Vec<BudgetStatus>,
    /// The last failures, all pools.
    recent_failures: VecDeque<FailureRecord>,
    /// Failed launches counted.
    num_failed: u32,
    /// Time between ticks (for the estimates).
    tick: Duration,
}

/// One pool's listing, as its driver hands it to [`Engine::listed`].
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// The pool's jobs.
    pub jobs: Vec<WorkerJob>,
    /// Pending jobs its backend says are not merely queued (held, blocked).
    pub pending_kinds: FxHashMap<String, PendingKind>,
    /// Jobs its backend deleted since the last listing (`worker_reaped`).
    pub reaped: Vec<String>,
}

/// What the observe step gives the plan step.
#[derive(Debug, Default)]
pub(crate) struct Observation {
    /// The pools and the server, as the policy sees them (the driver adds the staged bundles).
    pub pools: PoolsObservation,
    /// What the listings and check-ins showed, for metrics.
    pub events: Vec<TickEvent>,
    /// Jobs seen failed for the first time.
    pub newly_failed: Vec<WorkerJob>,
}

impl Engine {
    /// An engine for `pools`, under the overall `budget`, ticking every `tick`.
    pub fn new(pools: Vec<PoolSpec>, budget: BudgetLimits, tick: Duration) -> Self {
        Self {
            pools: pools.into_iter().map(PoolRuntime::new).collect(),
            checkins: LastView::default(),
            server: ServerMemory::default(),
            estimates: EstimateMemory::default(),
            budget,
            budgets: Vec::new(),
            recent_failures: VecDeque::new(),
            num_failed: 0,
            tick,
        }
    }

    /// The pools' policies, in declaration order (a pool's `runs_per_worker` is its workers'
    /// `exit_after_num_runs`).
    pub fn policies(&self) -> Vec<PoolPolicy> {
        let policy = |pool: &PoolSpec| PoolPolicy {
            runs_per_worker: pool.worker.exit_after_num_runs.filter(|n| *n > 0),
            ..pool.policy.clone()
        };
        self.pools.iter().map(|p| policy(&p.pool)).collect()
    }

    /// Takes a new overall budget and tick (a reload).
    pub fn reconfigure(&mut self, budget: BudgetLimits, tick: Duration) {
        self.budget = budget;
        self.tick = tick;
    }

    /// Failed launches counted so far.
    pub fn num_failed(&self) -> u32 {
        self.num_failed
    }

    /// The last failures, oldest first.
    pub fn recent_failures(&self) -> impl Iterator<Item = &FailureRecord> {
        self.recent_failures.iter()
    }

    /// Each budget's state, as of the last plan.
    pub fn budgets(&self) -> &[BudgetStatus] {
        &self.budgets
    }

    /// The server's workers, as last listed.
    pub fn checkin_workers(&self) -> Option<&[CheckedInWorker]> {
        self.checkins.view.as_ref().map(|view| view.workers())
    }

    /// Takes pool `index`'s launch record (read back at start; `start` is the clock's zero as
    /// time since the Unix epoch), and the overdue bundles it launched for.
    pub fn take_record(&mut self, index: usize, record: record::LaunchRecord, start: Duration) {
        let overdue: Vec<String> = record.overdue_launches().cloned().collect();
        self.server.launched_for(&overdue);
        self.pools[index].take_record(record, start);
    }

    /// Takes pool `index`'s listing made at `now` (`start`: the clock's zero as time since
    /// the Unix epoch): its jobs, the pending ones its backend says are held, and the jobs its
    /// backend reaped.
    pub fn listed(
        &mut self,
        index: usize,
        listing: Listing,
        now: Duration,
        start: Duration,
    ) -> ListingNews {
        let runtime = &mut self.pools[index];
        runtime.pending_kinds = listing.pending_kinds;
        runtime.forecasts = (listing.jobs.iter())
            .filter(|job| job.state == JobState::Pending)
            .filter_map(|job| {
                let at = job.expected_start?.duration_since(UNIX_EPOCH).ok()?;
                Some((job.id.clone(), at.saturating_sub(start)))
            })
            .collect();
        let mut news = runtime.take_listing(listing.jobs, now, start);
        let reaped = listing.reaped;
        let pool = runtime.name();
        news.events
            .extend(reaped.into_iter().map(|job_id| TickEvent::JobReaped {
                pool: pool.to_owned(),
                job_id,
            }));
        news
    }

    /// Takes this tick's worker list from the server (`None`: not asked; an error keeps the
    /// last view) into the last view and each pool's check-in memory.
    pub fn take_checkins(
        &mut self,
        result: Option<Result<CheckinView, String>>,
        now: Duration,
    ) -> Vec<TickEvent> {
        self.checkins.take(result, now);
        let mut events = Vec::new();
        for runtime in &mut self.pools {
            runtime.checkin_aware = self.checkins.view.is_some();
            if let (Some(view), true) = (&self.checkins.view, self.checkins.fresh) {
                self.estimates.take_view(runtime, view, now);
                events.extend(runtime.take_checkins(view, now));
            }
        }
        events
    }

    /// The observe step: each pool's listing news (or why it could not be listed) into the
    /// pure observation, with the server view for the manager `identity` (none when it is
    /// unknown) and each pool's start times; the staged bundles are the driver's to add.
    pub fn observe(
        &mut self,
        listings: Vec<Result<ListingNews, String>>,
        identity: Option<&UserIdentity>,
        now: Duration,
    ) -> Observation {
        let mut observed = Observation::default();
        for (runtime, listing) in self.pools.iter_mut().zip(listings) {
            observed.events.extend(runtime.capacity_tick(now));
            let unobserved = match listing {
                Ok(news) => {
                    self.num_failed += news.newly_failed.len() as u32;
                    observed.newly_failed.extend(news.newly_failed);
                    observed.events.extend(news.events);
                    runtime::remember(&mut self.recent_failures, news.failures);
                    None
                }
                Err(error) => Some(error),
            };
            let sighting = self.checkins.sighting();
            (observed.pools.pools).push(runtime.observation(now, unobserved, sighting));
        }
        let workers = self.checkins.view.as_ref().map(|view| view.workers());
        let group_shared = self.pools.iter().any(|r| {
            let group = r.pool.worker.group.as_deref();
            group.is_some_and(|g| !g.is_empty())
        });
        let ended: FxHashSet<&str> = (self.pools.iter())
            .filter(|runtime| outlives_the_listing(runtime.pool.worker.idle_seconds))
            .flat_map(|runtime| runtime.checkins.ended())
            .collect();
        observed.pools.server = (self.server).view(identity, workers, &ended, group_shared, now);
        observed.pools.times = (self.pools.iter())
            .map(|runtime| self.estimates.times(runtime, now, self.tick))
            .collect();
        observed
    }

    /// How many staged bundles of which kinds the pools can absorb (the staged search reads
    /// no more); `policies` are [`Engine::policies`].
    pub fn need<'a>(
        policies: &'a [PoolPolicy],
        observed: &'a PoolsObservation,
        now: Duration,
    ) -> Need<'a> {
        Need::new(policies, &observed.pools, now)
            .with_server(observed.server.as_ref())
            .with_times(&observed.times)
    }
}
