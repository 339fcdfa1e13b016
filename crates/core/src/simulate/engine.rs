//! The event loop: bundle arrivals, job starts, bundle ends and idle exits between the
//! manager's ticks; the tick itself (`engine/tick.rs`) runs the manager's pool memory and
//! `plan_pools`.

use super::SimConfig;
use super::report::{PoolReport, Series, SimReport, WaitStats};
use super::rng::SplitMix64;
use super::workload::Workload;
use crate::backend::{LaunchRequest, WorkerBackend, WorkerJob};
use crate::bundle::{StagedBundle, WorkerShape};
use crate::error::{Error, Result};
use crate::manager::Pool;
use crate::manager::runtime::PoolRuntime;
use crate::pools::{PoolPolicy, misfit, preference_order};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

mod tick;

/// Stands in for a platform inside [`PoolRuntime`]; the simulator drives the jobs itself.
#[derive(Debug)]
struct SimulatedBackend {
    shape: WorkerShape,
}

#[async_trait::async_trait]
impl WorkerBackend for SimulatedBackend {
    fn name(&self) -> &str {
        "simulated"
    }
    fn worker_shape(&self) -> WorkerShape {
        self.shape
    }
    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        Err(Error::InvalidConfig(
            "the simulator lists jobs itself".into(),
        ))
    }
    async fn start_worker_job(&self, _request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        Err(Error::InvalidConfig(
            "the simulator starts jobs itself".into(),
        ))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Start,
    Fail,
    Stuck,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Pending,
    Active,
    /// Failed before active: listed once more, then gone.
    Failed,
    Gone,
}

#[derive(Debug)]
struct Job {
    pool: usize,
    id: String,
    phase: Phase,
    fate: Fate,
    active_at: u64,
    /// The bundle it runs and since when.
    running: Option<(u32, u64)>,
    runs: u32,
    idle_since: u64,
    idle_generation: u32,
}

/// Bundles that the same pools fit (for the policy and for the server).
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

/// `(time, sequence, kind, job, idle generation)`: ordered by time, then by scheduling order.
type Event = (u64, u64, u8, u32, u32);

const READY: u8 = 0;
const FINISH: u8 = 1;
const IDLE_EXIT: u8 = 2;

#[derive(Debug, Default)]
struct Stats {
    launches: u64,
    failures: u64,
    stuck_stops: u64,
    live: usize,
    active: usize,
    peak: usize,
    worker_ms: u64,
    busy_ms: u64,
    waits: Vec<u64>,
}

/// One simulation run.
#[derive(Debug)]
pub(super) struct Sim<'a> {
    workload: &'a Workload,
    policies: Vec<PoolPolicy>,
    servers: Vec<PoolPolicy>,
    order: Vec<usize>,
    config: &'a SimConfig,
    runtimes: Vec<PoolRuntime>,
    rng: SplitMix64,
    jobs: Vec<Job>,
    pool_jobs: Vec<Vec<u32>>,
    idle: Vec<BTreeSet<(u64, u32)>>,
    classes: Vec<Class>,
    pool_classes: Vec<Vec<usize>>,
    class_of_key: HashMap<(u32, u32, u64, u32), usize>,
    class_of_masks: HashMap<(u64, u64, bool), usize>,
    events: BinaryHeap<Reverse<Event>>,
    sequence: u64,
    cursor: usize,
    runnable_left: usize,
    unrunnable: usize,
    started: usize,
    finished: usize,
    last_finish: u64,
    stats: Vec<Stats>,
    series: Series,
    ticks: u64,
}

impl<'a> Sim<'a> {
    pub(super) fn new(
        workload: &'a Workload,
        policies: &[PoolPolicy],
        config: &'a SimConfig,
    ) -> Self {
        let runtimes = policies
            .iter()
            .map(|policy| {
                PoolRuntime::new(Pool {
                    policy: policy.clone(),
                    backend: Arc::new(SimulatedBackend {
                        shape: policy.shape,
                    }),
                    worker: crate::command::WorkerOptions::default(),
                })
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
        Self {
            workload,
            policies: policies.to_vec(),
            servers,
            order: preference_order(policies),
            config,
            runtimes,
            rng: SplitMix64::new(config.seed),
            jobs: Vec::new(),
            pool_jobs: vec![Vec::new(); n],
            idle: vec![BTreeSet::new(); n],
            classes: Vec::new(),
            pool_classes: vec![Vec::new(); n],
            class_of_key: HashMap::new(),
            class_of_masks: HashMap::new(),
            events: BinaryHeap::new(),
            sequence: 0,
            cursor: 0,
            runnable_left: 0,
            unrunnable: 0,
            started: 0,
            finished: 0,
            last_finish: 0,
            stats: (0..n).map(|_| Stats::default()).collect(),
            series: Series::new(3 * n),
            ticks: 0,
        }
    }

    pub(super) fn run(mut self) -> SimReport {
        let sleep = self.config.sleep_time.as_millis().max(1) as u64;
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
            self.tick(tick_at);
            tick_at += sleep;
        };
        self.report(end, drained)
    }

    fn done(&self) -> bool {
        self.cursor == self.workload.arrivals.len() && self.runnable_left == 0
    }

    /// Handles every event up to `until` (inclusive); returns the end time when the workload
    /// is done.
    fn process_until(&mut self, until: u64) -> Option<u64> {
        loop {
            if self.done() {
                let last_arrival = self.workload.arrivals.last().map_or(0, |a| a.at_ms);
                return Some(self.last_finish.max(last_arrival));
            }
            let next_event = self.events.peek().map(|Reverse(e)| e.0);
            let next_arrival = self.workload.arrivals.get(self.cursor).map(|a| a.at_ms);
            match (next_event, next_arrival) {
                (Some(e), a) if e <= until && a.is_none_or(|a| e <= a) => {
                    let Reverse((at, _, kind, job, generation)) = self.events.pop()?;
                    match kind {
                        READY => self.ready(job, at),
                        FINISH => self.finish(job, at),
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
            ..StagedBundle::new(format!("0x{bundle:08x}"))
        }
    }

    fn class_of(&mut self, bundle: u32) -> usize {
        let arrival = &self.workload.arrivals[bundle as usize];
        let key = (
            arrival.cpus,
            arrival.gpus,
            arrival.memory_bytes,
            arrival.queue,
        );
        if let Some(&class) = self.class_of_key.get(&key) {
            return class;
        }
        let staged = self.staged_bundle(bundle);
        let mask = |policies: &[PoolPolicy]| {
            policies
                .iter()
                .enumerate()
                .filter(|(_, p)| misfit(p, &staged).is_none())
                .fold(0u64, |m, (i, _)| m | 1 << i)
        };
        let policy_mask = mask(&self.policies);
        let server_mask = mask(&self.servers);
        let visible = self.visible(&staged);
        let masks = (policy_mask, server_mask, visible);
        let class = match self.class_of_masks.get(&masks) {
            Some(&class) => class,
            None => {
                let index = self.classes.len();
                let fitting = || {
                    self.policies
                        .iter()
                        .enumerate()
                        .filter(|(p, _)| policy_mask & (1 << p) != 0)
                        .map(|(_, policy)| policy.max as usize)
                };
                self.classes.push(Class {
                    server_mask,
                    visible,
                    view_cap: fitting().sum::<usize>() + fitting().max().unwrap_or(0) + 1,
                    preferred: self
                        .order
                        .iter()
                        .copied()
                        .find(|&p| visible && policy_mask & (1 << p) != 0),
                    queue: VecDeque::new(),
                });
                for (p, classes) in self.pool_classes.iter_mut().enumerate() {
                    if server_mask & (1 << p) != 0 {
                        classes.push(index);
                    }
                }
                self.class_of_masks.insert(masks, index);
                index
            }
        };
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
        let server_mask = self.classes[class].server_mask;
        if server_mask == 0 {
            self.unrunnable += 1;
        } else {
            self.runnable_left += 1;
            let idle_worker = self
                .order
                .iter()
                .filter(|&&p| server_mask & (1 << p) != 0)
                .find_map(|&p| self.idle[p].first().copied().map(|w| (p, w)));
            if let Some((p, (since, job))) = idle_worker {
                self.idle[p].remove(&(since, job));
                self.start_bundle(job, bundle, now);
                return;
            }
        }
        self.classes[class].queue.push_back(bundle);
    }

    /// The oldest staged bundle the worker of `job` can run, taken off the queue.
    fn take_for(&mut self, job: u32) -> Option<u32> {
        let pool = self.jobs[job as usize].pool;
        let best = self.pool_classes[pool]
            .iter()
            .filter_map(|&c| self.classes[c].queue.front().map(|&b| (b, c)))
            .min()?;
        self.classes[best.1].queue.pop_front();
        Some(best.0)
    }

    fn start_bundle(&mut self, job: u32, bundle: u32, now: u64) {
        let pool = self.jobs[job as usize].pool;
        let arrival = self.workload.arrivals[bundle as usize];
        self.jobs[job as usize].running = Some((bundle, now));
        self.stats[pool].waits.push(now - arrival.at_ms);
        self.started += 1;
        self.schedule(now + arrival.duration_ms, FINISH, job, 0);
    }

    fn work_or_idle(&mut self, job: u32, now: u64) {
        if let Some(bundle) = self.take_for(job) {
            self.start_bundle(job, bundle, now);
            return;
        }
        let worker = &mut self.jobs[job as usize];
        worker.idle_since = now;
        worker.idle_generation += 1;
        let (pool, generation) = (worker.pool, worker.idle_generation);
        self.idle[pool].insert((now, job));
        if !self.config.worker_idle.is_zero() {
            let at = now + self.config.worker_idle.as_millis() as u64;
            self.schedule(at, IDLE_EXIT, job, generation);
        }
    }

    fn ready(&mut self, job: u32, now: u64) {
        let worker = &mut self.jobs[job as usize];
        if worker.phase != Phase::Pending {
            return;
        }
        let pool = worker.pool;
        match worker.fate {
            Fate::Fail => {
                worker.phase = Phase::Failed;
                self.stats[pool].failures += 1;
                self.stats[pool].live -= 1;
            }
            Fate::Start => {
                worker.phase = Phase::Active;
                worker.active_at = now;
                self.stats[pool].active += 1;
                self.work_or_idle(job, now);
            }
            Fate::Stuck => {}
        }
    }

    fn finish(&mut self, job: u32, now: u64) {
        let worker = &mut self.jobs[job as usize];
        let Some((_, since)) = worker.running.take() else {
            return;
        };
        worker.runs += 1;
        let (pool, runs) = (worker.pool, worker.runs);
        self.stats[pool].busy_ms += now - since;
        self.finished += 1;
        self.runnable_left -= 1;
        self.last_finish = now;
        if self.config.worker_max_runs.is_some_and(|max| runs >= max) {
            self.exit(job, now);
        } else {
            self.work_or_idle(job, now);
        }
    }

    fn idle_exit(&mut self, job: u32, generation: u32, now: u64) {
        let worker = &self.jobs[job as usize];
        if worker.phase == Phase::Active
            && worker.running.is_none()
            && worker.idle_generation == generation
        {
            self.exit(job, now);
        }
    }

    /// An active worker ends (idle, or its run count reached).
    fn exit(&mut self, job: u32, now: u64) {
        let worker = &mut self.jobs[job as usize];
        worker.phase = Phase::Gone;
        let pool = worker.pool;
        self.idle[pool].remove(&(worker.idle_since, job));
        let stats = &mut self.stats[pool];
        stats.worker_ms += now - worker.active_at;
        stats.live -= 1;
        stats.active -= 1;
    }

    fn sample(&mut self, now_ms: u64) {
        let n = self.policies.len();
        let mut row = vec![0u32; 3 * n];
        for class in &self.classes {
            if let Some(p) = class.preferred {
                row[3 * p] += class.queue.len() as u32;
            }
        }
        for (p, stats) in self.stats.iter().enumerate() {
            row[3 * p + 1] = stats.live as u32;
            row[3 * p + 2] = stats.active as u32;
        }
        self.series.push(now_ms, &row);
    }

    fn report(mut self, end: u64, drained: bool) -> SimReport {
        for job in &self.jobs {
            if job.phase == Phase::Active {
                let stats = &mut self.stats[job.pool];
                stats.worker_ms += end.saturating_sub(job.active_at);
                if let Some((_, since)) = job.running {
                    stats.busy_ms += end.saturating_sub(since);
                }
            }
        }
        let no_pool = self
            .classes
            .iter()
            .filter(|c| c.preferred.is_none())
            .map(|c| c.queue.len())
            .sum();
        let mut all_waits = Vec::new();
        let pools: Vec<PoolReport> = self
            .policies
            .iter()
            .zip(&mut self.stats)
            .map(|(policy, stats)| {
                all_waits.extend_from_slice(&stats.waits);
                PoolReport {
                    name: policy.name.clone(),
                    launch_mode: policy.launch_mode,
                    shape: policy.shape.to_string(),
                    min: policy.min,
                    max: policy.max,
                    launches: stats.launches,
                    failures: stats.failures,
                    stuck_stops: stats.stuck_stops,
                    peak_workers: stats.peak,
                    worker_hours: hours(stats.worker_ms),
                    busy_hours: hours(stats.busy_ms),
                    bundles_run: stats.waits.len(),
                    wait: WaitStats::of(&mut stats.waits),
                }
            })
            .collect();
        SimReport {
            seed: self.config.seed,
            sleep_seconds: self.config.sleep_time.as_secs_f64(),
            simulated_seconds: end as f64 / 1000.0,
            ticks: self.ticks,
            bundles: self.workload.arrivals.len(),
            started: self.started,
            finished: self.finished,
            unfinished: self.workload.arrivals.len() - self.finished - self.unrunnable,
            unrunnable: self.unrunnable,
            staged_for_no_pool: no_pool,
            drained,
            total_wait: WaitStats::of(&mut all_waits),
            pools,
            series: self.series,
        }
    }
}

fn hours(ms: u64) -> f64 {
    (ms as f64 / 3_600_000.0 * 1000.0).round() / 1000.0
}
