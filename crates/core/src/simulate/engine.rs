//! The event loop: bundle arrivals, job starts, bundle ends and idle exits between the
//! manager's ticks; the server's dispatch (`engine/serve.rs`) after each, a worker's life
//! (`engine/worker.rs`) in between; the tick itself (`engine/tick.rs`) drives the manager's
//! own tick engine ([`crate::engine`]).

use super::SimConfig;
use super::report::{Series, SimReport};
use super::rng::SplitMix64;
use super::workload::Workload;
use crate::bundle::StagedBundle;
use crate::dispatch::Resources;
use crate::engine::{Engine, PoolSpec};
use crate::pools::{PoolPolicy, misfit, preference_order};
use rustc_hash::FxHashSet;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

mod platform;
mod serve;
mod summary;
mod tick;
mod worker;

/// The user the simulated manager runs as: the root user, so its workers are shared and the
/// owners' `parallel_run_quota` applies on them.
const ROOT: &str = "codalab";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Start,
    Fail,
    Stuck,
    /// Preempted by its platform before its worker is active.
    Preempt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Pending,
    Active,
    /// Failed before active: listed once more, then gone.
    Failed,
    /// Preempted (before active, or reclaimed while active): listed once more, then gone.
    Preempted,
    Gone,
}

#[derive(Debug)]
struct Job {
    pool: usize,
    id: String,
    /// Its launch unique (its worker's id is `host-<unique>`).
    unique: String,
    phase: Phase,
    fate: Fate,
    active_at: u64,
    /// The bundles it runs and since when.
    running: Vec<(u32, u64)>,
    /// What those runs hold, as the server counts it.
    in_use: Resources,
    /// Bundles it started.
    started: u32,
    /// When its worker's check-ins start over: active, or a check-in after the last that
    /// brought it a bundle ([`SimConfig::checkin_gap`](super::SimConfig::checkin_gap)).
    checkins_from: u64,
    /// Since when it has had a run (busy time), while it has one.
    busy_since: Option<u64>,
    idle_generation: u32,
    /// Pending in its platform's queue, not yet given a place (see [`SimConfig::platforms`]).
    queued: bool,
    /// Holds one of its platform's places (from its start until it ends).
    placed: bool,
    /// Milliseconds from its place to its worker being active (the start latency drawn).
    latency: u64,
    /// When it got its place (its worker started starting).
    placed_at: u64,
}

/// Bundles of one request and owner (for the policy's view and the server's dispatch).
#[derive(Debug)]
struct Class {
    server_mask: u64,
    /// Returned by the manager's staged search.
    visible: bool,
    /// Bundles of the class the policy sees at most (see the module doc).
    view_cap: usize,
    /// The most preferred pool the policy fits it to (for the plot).
    preferred: Option<usize>,
    queue: VecDeque<u32>,
}

/// `(time, sequence, kind, job, idle generation or bundle)`: ordered by time, then by
/// scheduling order.
type Event = (u64, u64, u8, u32, u32);

const READY: u8 = 0;
const FINISH: u8 = 1;
const IDLE_EXIT: u8 = 2;
/// A pool's platform's busy spell ends (the event's job is the pool's index).
const UNBLOCK: u8 = 3;
/// The platform reclaims an active worker (a Spot VM's end).
const RECLAIM: u8 = 4;
/// The server's dispatch may start something: a worker's next check-in, the end of a wait
/// ([`SimConfig::checkin_gap`](super::SimConfig::checkin_gap)), a ghost's time on the list
/// running out ([`SimConfig::ghost`](super::SimConfig::ghost)).
const SERVE: u8 = 5;
/// How long a worker's check-in that brought it a bundle takes to end, before its pause
/// ([`SimConfig::checkin_gap`](super::SimConfig::checkin_gap)): the median of the `advise`
/// bench's 31 runs started back to back on one worker is 5.6 s apart (5.4–7.8 s), where a
/// check-in without a message comes back 5.02–5.04 s after it began.
const HANDLES_A_RUN_MS: u64 = 600;
/// A worker's check-in reports a run gone: the room it held is free
/// ([`SimConfig::checkin_gap`](super::SimConfig::checkin_gap)).
const RUN_REPORTED: u8 = 6;

#[derive(Debug, Default)]
struct Stats {
    launches: u64,
    failures: u64,
    stuck_stops: u64,
    withdrawn: u64,
    live: usize,
    active: usize,
    peak: usize,
    worker_ms: u64,
    busy_ms: u64,
    waits: Vec<u64>,
    /// Workers that ended without running a bundle.
    unused: u64,
    /// Runs lost with a reclaimed worker.
    lost: usize,
    /// Runs of a reclaimed preemptible worker, staged again.
    restaged: usize,
    /// The time those runs had run when their worker was reclaimed (run again from the start).
    rerun_ms: u64,
}

/// One simulation run.
#[derive(Debug)]
pub(super) struct Sim<'a> {
    workload: &'a Workload,
    policies: Vec<PoolPolicy>,
    servers: Vec<PoolPolicy>,
    order: Vec<usize>,
    config: &'a SimConfig,
    /// The manager's tick engine, as the manager runs it.
    engine: Engine,
    rng: SplitMix64,
    jobs: Vec<Job>,
    pool_jobs: Vec<Vec<u32>>,
    classes: Vec<Class>,
    class_of_key: HashMap<(u32, u32, u64, u32, u32), usize>,
    /// Each owner's `parallel_run_quota` (by owner index), when the config gives one.
    quotas: HashMap<u32, i64>,
    /// Each owner's runs on the (shared) workers, by owner index.
    owner_runs: HashMap<u32, i64>,
    /// Each scored estimate: its kind and error in milliseconds.
    estimate_errors: Vec<(&'static str, u64)>,
    events: BinaryHeap<Reverse<Event>>,
    /// Exited workers still on the server's list, and until when ([`SimConfig::ghost`](super::SimConfig::ghost)).
    ghosts: Vec<(u32, u64)>,
    /// The instants a `SERVE` event is pending for (one each).
    serves: FxHashSet<u64>,
    /// When the last event handled happened.
    last_event: u64,
    /// The server's dispatch round in progress ([`serve::Round`]).
    round: Option<serve::Round>,
    sequence: u64,
    cursor: usize,
    runnable_left: usize,
    unrunnable: usize,
    started: usize,
    /// Bundles staged again after a reclaim: their next start is not a new bundle's start.
    restarted: std::collections::HashSet<u32>,
    finished: usize,
    last_finish: u64,
    stats: Vec<Stats>,
    series: Series,
    ticks: u64,
    /// Per pool: its platform's state.
    platforms: Vec<platform::PlatformState>,
    /// Every tick's trace, when traced.
    trace: Option<Vec<super::TickTrace>>,
}

impl<'a> Sim<'a> {
    pub(super) fn new(
        workload: &'a Workload,
        policies: &[PoolPolicy],
        config: &'a SimConfig,
    ) -> Self {
        // Each pool's workers as the simulation runs them (their minimum life is what a
        // launch charges to the budget use).
        let pools = policies
            .iter()
            .map(|policy| PoolSpec {
                policy: policy.clone(),
                backend: "simulated".to_owned(),
                worker: crate::command::WorkerOptions {
                    idle_seconds: config.worker_idle.as_secs(),
                    exit_after_num_runs: policy.runs_per_worker,
                    ..crate::command::WorkerOptions::default()
                },
            })
            .collect();
        let servers = policies
            .iter()
            .map(|p| PoolPolicy {
                match_request_queue: true,
                check_shape: true,
                ..p.clone()
            })
            .collect();
        let n = policies.len();
        let quotas = (config.quotas.iter())
            .filter_map(|(owner, quota)| {
                let index = workload.owners.iter().position(|o| o == owner)?;
                Some((index as u32, i64::from(*quota)))
            })
            .collect();
        Self {
            workload,
            policies: policies.to_vec(),
            servers,
            order: preference_order(policies),
            config,
            engine: Engine::new(pools, config.budget, config.sleep_time),
            rng: SplitMix64::new(config.seed),
            jobs: Vec::new(),
            pool_jobs: vec![Vec::new(); n],
            classes: Vec::new(),
            class_of_key: HashMap::new(),
            quotas,
            owner_runs: HashMap::new(),
            estimate_errors: Vec::new(),
            events: BinaryHeap::new(),
            ghosts: Vec::new(),
            serves: FxHashSet::default(),
            last_event: 0,
            round: None,
            sequence: 0,
            cursor: 0,
            runnable_left: 0,
            unrunnable: 0,
            started: 0,
            restarted: Default::default(),
            finished: 0,
            last_finish: 0,
            stats: (0..n).map(|_| Stats::default()).collect(),
            series: Series::new(3 * n),
            ticks: 0,
            platforms: (policies.iter())
                .map(|p| platform::PlatformState::new(config.platforms.get(&p.name)))
                .collect(),
            trace: None,
        }
    }

    /// Keeps every tick's trace.
    pub(super) fn traced(mut self) -> Self {
        self.trace = Some(Vec::new());
        self
    }

    /// Runs, and returns the report with every tick's trace (empty unless [`Sim::traced`]).
    pub(super) fn run_traced(self) -> (SimReport, Vec<super::TickTrace>) {
        self.run_inner()
    }

    pub(super) fn run(self) -> SimReport {
        self.run_inner().0
    }

    fn run_inner(mut self) -> (SimReport, Vec<super::TickTrace>) {
        let last_arrival = self.workload.arrivals.last().map_or(0, |a| a.at_ms);
        let deadline = last_arrival.saturating_add(self.config.drain.as_millis() as u64);
        let mut tick_at = 0u64;
        let (end, drained) = loop {
            if let Some(end) = self.process_until(tick_at) {
                break (end, false);
            }
            if tick_at > deadline {
                break (tick_at, true);
            }
            let next_tick = self.tick(tick_at);
            tick_at += next_tick.as_millis().max(1) as u64;
        };
        let trace = self.trace.take().unwrap_or_default();
        (self.report(end, drained), trace)
    }

    /// Handles every event up to `until` (inclusive); returns the end time when the workload
    /// is done.
    fn process_until(&mut self, until: u64) -> Option<u64> {
        loop {
            if let Some(end) = self.over_by(until) {
                return Some(end);
            }
            let next_event = self.events.peek().map(|Reverse(e)| e.0);
            let next_arrival = self.workload.arrivals.get(self.cursor).map(|a| a.at_ms);
            match (next_event, next_arrival) {
                (Some(e), a) if e <= until && a.is_none_or(|a| e <= a) => {
                    let Reverse((at, _, kind, job, generation)) = self.events.pop()?;
                    self.last_event = at;
                    match kind {
                        READY => self.ready(job, at),
                        FINISH => self.finish(job, generation, at),
                        RUN_REPORTED => self.run_reported(job, generation, at),
                        UNBLOCK => self.unblock(job as usize, at),
                        RECLAIM => self.reclaim(job, at),
                        SERVE => {
                            self.serves.remove(&at);
                            self.serve(at);
                        }
                        _ => self.idle_exit(job, generation, at),
                    }
                }
                (_, Some(a)) if a <= until => {
                    let bundle = self.cursor as u32;
                    self.cursor += 1;
                    self.arrive(bundle, a);
                }
                _ => return None,
            }
        }
    }

    fn schedule(&mut self, at: u64, kind: u8, job: u32, generation: u32) {
        self.sequence += 1;
        self.events
            .push(Reverse((at, self.sequence, kind, job, generation)));
    }

    fn staged_bundle(&self, bundle: u32) -> StagedBundle {
        let arrival = &self.workload.arrivals[bundle as usize];
        StagedBundle {
            request_cpus: arrival.cpus,
            request_gpus: arrival.gpus,
            request_memory: arrival.memory_bytes,
            request_queue: self.workload.queue_of(arrival).to_owned(),
            owner_id: Some(self.workload.owner_of(arrival))
                .filter(|o| !o.is_empty())
                .map(str::to_owned),
            ..StagedBundle::new(uuid_of(bundle))
        }
    }

    fn class_of(&mut self, bundle: u32) -> usize {
        let arrival = &self.workload.arrivals[bundle as usize];
        let key = (
            arrival.cpus,
            arrival.gpus,
            arrival.memory_bytes,
            arrival.queue,
            arrival.owner,
        );
        if let Some(&class) = self.class_of_key.get(&key) {
            return class;
        }
        let staged = self.staged_bundle(bundle);
        let requested = Resources::requested(&staged);
        let mask = |policies: &[PoolPolicy], server: bool| {
            let fits = |p: &PoolPolicy| {
                misfit(p, &staged).is_none()
                    && (!server
                        || Resources::of_shape(&p.shape)
                            .shortfall(&requested)
                            .is_none())
            };
            (policies.iter().enumerate())
                .filter(|(_, p)| fits(p))
                .fold(0u64, |m, (i, _)| m | 1 << i)
        };
        let policy_mask = mask(&self.policies, false);
        let server_mask = mask(&self.servers, true);
        let visible = self.visible(&staged);
        // Each bundle holds at least one CPU: a worker of `cpus` CPUs holds at most that many.
        let fitting = || {
            (self.policies.iter().enumerate())
                .filter(|(p, _)| policy_mask & (1 << p) != 0)
                .map(|(_, policy)| policy.max as usize * policy.shape.cpus.max(1) as usize)
        };
        let view_cap = fitting().sum::<usize>() + fitting().max().unwrap_or(0) + 1;
        let preferred =
            (self.order.iter().copied()).find(|&p| visible && policy_mask & (1 << p) != 0);
        self.classes.push(Class {
            server_mask,
            visible,
            view_cap,
            preferred,
            queue: VecDeque::new(),
        });
        let class = self.classes.len() - 1;
        self.class_of_key.insert(key, class);
        class
    }

    /// Whether the manager's staged search returns the bundle: in the single-backend mode
    /// with an exclusive tag the search asks for that queue (as `staged_keywords` does).
    fn visible(&self, bundle: &StagedBundle) -> bool {
        match self.policies.as_slice() {
            [single] if !single.match_request_queue && single.tag_exclusive => {
                single.tag.as_deref() == Some(bundle.request_queue.as_str())
            }
            _ => true,
        }
    }

    fn arrive(&mut self, bundle: u32, now: u64) {
        let class = self.class_of(bundle);
        if self.classes[class].server_mask == 0 {
            self.unrunnable += 1;
            self.classes[class].queue.push_back(bundle);
            return;
        }
        self.runnable_left += 1;
        let queue = &mut self.classes[class].queue;
        queue.push_back(bundle);
        // Behind a bundle of the same request and owner that waits, it waits too.
        if queue.len() == 1 {
            // Where the server's rounds take time, a round takes the bundles staged at its
            // start: those staged at one instant are offered in one round.
            match self.config.checkin_gap.is_some() || self.config.ghost.is_some() {
                true => self.serve_at(now + 1),
                false => self.serve(now),
            }
        }
    }
}

/// The uuid of simulated bundle `bundle`.
fn uuid_of(bundle: u32) -> String {
    format!("0x{bundle:08x}")
}

/// The bundle of a uuid made by [`uuid_of`].
fn bundle_of(uuid: &str) -> Option<u32> {
    u32::from_str_radix(uuid.strip_prefix("0x")?, 16).ok()
}

fn add(a: Resources, b: Resources) -> Resources {
    Resources {
        cpus: a.cpus.saturating_add(b.cpus),
        gpus: a.gpus.saturating_add(b.gpus),
        memory_bytes: a.memory_bytes.saturating_add(b.memory_bytes),
    }
}
