//! The manager loop: observe → plan → act → report, then sleep. The manager does the I/O; what
//! a tick remembers and decides is the tick engine's (`crate::engine`, which the simulator
//! drives too).
//!
//! One [`Manager::tick`] does what one upstream iteration does, for every pool:
//! 1. **observe** (`observe.rs`): list each pool's worker jobs and the server's workers, hand
//!    them to the engine, and search the staged bundles the pools can absorb;
//! 2. **plan** (`tick.rs`): the engine applies the budgets and asks the pure pool policy
//!    ([`plan_pools`](crate::pools::plan_pools)) which pool takes which bundle and what each
//!    pool launches or stops; the manager logs it (`logs.rs`);
//! 3. **act** (`act.rs`): stop the jobs the policy named, then launch, pool by pool, handing
//!    each result to the engine;
//! 4. **report** (`tick.rs`): count the tick's [`TickEvent`]s and publish the [`Status`]
//!    snapshot ([`crate::status`]).
//!
//! A manager serves one pool ([`Manager::new`]) or several ([`Manager::with_pools`]).
//! Upstream's single-backend mode is one pool, [`Pool::single_backend`], whose launch rules in
//! compat mode are exactly [`policy::plan`](crate::policy::plan) and whose tag narrows the
//! staged search. [`Manager::run`] repeats the tick every `sleep_time`; after each tick one error
//! policy (`error_policy.rs`, kube-runtime's `error_policy`) decides the next delay: fatal
//! errors stop the loop, everything else is retried with exponential backoff (logged once per
//! streak), so a server or batch system that is down never crashes the manager and never leads
//! to launches on stale data.

use crate::backend::WorkerBackend;
use crate::codalab::CodaLabClient;
use crate::error::{Error, Result};
use crate::pools::PoolPolicy;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

mod act;
mod error_policy;
mod history;
mod journal;
pub(crate) mod logs;
mod observe;
mod pool;
mod quota;
mod reconfigure;
mod run;
mod shutdown;
mod streak;
mod tick;

pub use error_policy::{REFUSED_AGAIN_FOR, TICK_ERROR_KINDS};
pub use history::LOOKUP_BUDGET;
pub use pool::{Pool, RecordKey};
pub use reconfigure::{Change, DRAIN_THEN_RESTART, Reconfiguration};
pub use shutdown::SUBMIT_GRACE;
pub use tick::TickReport;

use crate::engine::{Engine, PoolSpec, record};
#[cfg(doc)]
use crate::status::TickEvent;
use crate::status::{Counters, Status};

/// Everything the loop needs besides the server and the pools.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Extra search keywords (`--search`).
    pub search: Vec<String>,
    /// Time between ticks (`--sleep-time`).
    pub sleep_time: Duration,
    /// Re-execute after this long (`--restart-after-seconds`).
    pub restart_after: Option<Duration>,
    /// Stop after more than this many failed launches (`--exit-after-num-failed`).
    pub exit_after_num_failed: Option<u32>,
    /// Render launches without submitting anything (`--dry-run`).
    pub dry_run: bool,
    /// Longest wait between tries while the server or backend keeps failing.
    pub max_backoff: Duration,
    /// The budget over all pools per rolling day (see [`crate::budget`]).
    pub budget: crate::budget::BudgetLimits,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        Self {
            search: Vec::new(),
            sleep_time: Duration::from_secs(5),
            restart_after: None,
            exit_after_num_failed: None,
            dry_run: false,
            max_backoff: Duration::from_secs(300),
            budget: crate::budget::BudgetLimits::default(),
        }
    }
}

/// Why [`Manager::run`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A shutdown was requested (SIGINT/SIGTERM).
    Shutdown,
    /// `--once`: one tick was run.
    Once {
        /// Launches that failed in that tick (the caller exits non-zero when any did).
        launch_errors: usize,
    },
    /// `--restart-after-seconds` elapsed: the caller re-executes the program.
    Restart,
    /// More failed launches than `--exit-after-num-failed` allows.
    TooManyFailures {
        /// Failed launches counted.
        failed: u32,
        /// The limit.
        limit: u32,
    },
}

/// The worker manager: one CodaLab server, one or more pools of workers.
#[derive(Debug)]
pub struct Manager {
    config: ManagerConfig,
    client: CodaLabClient,
    /// The tick's memory and rules.
    engine: Engine,
    /// Each pool's backend, in the engine's pool order.
    backends: Vec<Arc<dyn WorkerBackend>>,
    started: Instant,
    /// Time added by [`Manager::advance_clock`] (the whole clock once it is stopped).
    skipped: Duration,
    /// [`Manager::stop_clock`] was called.
    clock_stopped: bool,
    /// The uuids read last tick, oldest first (for "removed since last time").
    window: Vec<String>,
    /// Unserved bundles already logged, with the reason logged.
    reported: HashMap<String, &'static str>,
    reported_malformed: HashSet<String>,
    /// Bundles logged as spilled past a cheaper pool, and the pool they went to.
    spilled: HashMap<String, String>,
    ticks: u64,
    counters: Counters,
    status: watch::Sender<Status>,
    /// New configurations to apply before the next tick ([`Manager::reload_from`]).
    reloads: Option<mpsc::UnboundedReceiver<Reconfiguration>>,
    /// When the current tick started, for [`Status::last_tick_duration_seconds`].
    tick_started: Instant,
    /// Called once the server answered and took the credentials ([`Manager::on_ready`]).
    on_ready: Option<ReadyHook>,
    /// A submit in flight, a shutdown requested.
    stop_flags: shutdown::StopFlags,
    /// The owners' quotas and the owners of runs on shared workers, between ticks.
    quota: quota::QuotaMemory,
    /// The events: log, recent, subscribers.
    journal: journal::Journal,
    /// How long refused re-logins are retried ([`error_policy::REFUSED_AGAIN_FOR`]).
    refused_again_for: Duration,
    /// The history of the queue, when kept ([`Manager::keep_history`]).
    history: Option<history::History>,
}

/// What [`Manager::on_ready`] runs.
struct ReadyHook(Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for ReadyHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadyHook")
    }
}

impl Manager {
    /// A manager for one `pool`, fed by `client`; upstream's single-backend mode is the pool
    /// [`Pool::single_backend`] makes. The pool's policy is the caller's to validate
    /// ([`SingleBackendFlags::validate`](crate::pools::SingleBackendFlags::validate),
    /// [`PoolPolicy::validate`]); [`Manager::with_pools`] checks it.
    pub fn new(config: ManagerConfig, client: CodaLabClient, pool: Pool) -> Self {
        Self::build(config, client, vec![pool])
    }

    /// A manager for several pools (or one). Pool names must be unique, each policy valid,
    /// and the pool of the single-backend mode the only one.
    pub fn with_pools(
        config: ManagerConfig,
        client: CodaLabClient,
        pools: Vec<Pool>,
    ) -> Result<Self> {
        if pools.is_empty() {
            return Err(Error::InvalidConfig("no pools configured".into()));
        }
        check_pools(&pools)?;
        Ok(Self::build(config, client, pools))
    }

    fn build(config: ManagerConfig, client: CodaLabClient, pools: Vec<Pool>) -> Self {
        Self {
            engine: Engine::new(
                pools.iter().map(PoolSpec::from).collect(),
                config.budget,
                config.sleep_time,
            ),
            backends: pools.into_iter().map(|pool| pool.backend).collect(),
            config,
            client,
            started: Instant::now(),
            on_ready: None,
            skipped: Duration::ZERO,
            clock_stopped: false,
            window: Vec::new(),
            reported: HashMap::new(),
            reported_malformed: HashSet::new(),
            spilled: HashMap::new(),
            ticks: 0,
            counters: Counters::default(),
            status: watch::channel(Status::default()).0,
            reloads: None,
            tick_started: Instant::now(),
            stop_flags: shutdown::StopFlags::default(),
            quota: quota::QuotaMemory::default(),
            journal: journal::Journal::default(),
            refused_again_for: error_policy::REFUSED_AGAIN_FOR,
            history: None,
        }
    }

    /// The backend (of the first pool).
    pub fn backend(&self) -> &Arc<dyn WorkerBackend> {
        &self.backends[0]
    }

    /// The pools' policies, in declaration order.
    pub fn policies(&self) -> Vec<PoolPolicy> {
        self.engine.policies()
    }

    /// Failed launches counted so far.
    pub fn num_failed(&self) -> u32 {
        self.engine.num_failed()
    }

    /// The status snapshot as of the last tick.
    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// A receiver that sees every new status snapshot (one per tick), for a status server
    /// running beside [`Manager::run`].
    pub fn subscribe_status(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    /// The manager clock: time since the manager started (plus [`Manager::advance_clock`]).
    pub fn clock(&self) -> Duration {
        match self.clock_stopped {
            true => self.skipped,
            false => self.started.elapsed() + self.skipped,
        }
    }

    /// From now on the manager clock moves only by [`Manager::advance_clock`] (it keeps its
    /// reading): for replaying a timeline tick by tick, as a simulation's.
    pub fn stop_clock(&mut self) {
        self.skipped = self.clock();
        self.clock_stopped = true;
    }

    /// Moves the manager clock forward by `by`, as if that much time had passed: for
    /// simulations and tests of time-based rules (rate limit, pending timeout, backoff)
    /// without sleeping.
    pub fn advance_clock(&mut self, by: Duration) {
        self.skipped += by;
    }

    /// Keeps each pool's launch record (which jobs this manager launched, which checked in,
    /// the budget use) in `dir`, in a file named after the pool's identity from its key in
    /// `keys` (the backend and the keys that name its jobs; a pool missing there is named by
    /// its name), read back after a restart. Without this, the
    /// records live in memory: after a restart the manager stops none of the jobs it finds.
    /// A dry run reads the records (as the live manager left them) and never writes them.
    /// Fails when a record cannot be created or read, or another process holds it.
    ///
    /// Each key may carry a hash of the pool's settings ([`RecordKey::settings`]): a pool
    /// suspended for misconfiguration stays suspended over a restart with the same settings,
    /// and is resumed by one with other settings.
    pub fn keep_records(&mut self, dir: &Path, keys: &[RecordKey]) -> Result<()> {
        let start = unix_start(self.clock());
        for index in 0..self.engine.pools.len() {
            let name = self.engine.pools[index].name().to_owned();
            let key = keys.iter().find(|key| key.pool == name);
            let identity = key.map_or(name.as_str(), |key| key.identity.as_str());
            self.engine.pools[index].settings = key.and_then(|key| key.settings);
            let record = match self.config.dry_run {
                // A dry run beside the live manager: reads its record, holds and writes nothing.
                true => record::LaunchRecord::read_only(dir, identity)?,
                false => record::LaunchRecord::open(dir, identity)?,
            };
            tracing::info!(pool = %name, record = %record.path().map(|p| p.display().to_string()).unwrap_or_default(), "launch record of pool {name}: jobs it does not hold are never stopped by this manager");
            self.engine.take_record(index, record, start);
        }
        Ok(())
    }

    /// How long [`Manager::run`] goes on while the server refuses credentials it accepted
    /// before (default [`REFUSED_AGAIN_FOR`], 30 minutes); then it returns
    /// [`Error::Unauthenticated`].
    pub fn refuse_again_for(&mut self, bound: Duration) {
        self.refused_again_for = bound;
    }

    /// Runs `hook` once, at the first tick whose login succeeds (the server answered and took
    /// the credentials), before that tick searches: where the CLI says "started worker manager".
    pub fn on_ready(&mut self, hook: impl FnOnce() + Send + 'static) {
        self.on_ready = Some(ReadyHook(Box::new(hook)));
    }
}

/// The manager clock's zero when it reads `now`, as time since the Unix epoch (the terms the
/// engine keeps launch records and budget use in).
fn unix_start(now: Duration) -> Duration {
    record::unix_now().saturating_sub(now)
}

/// Checks a set of pools as a manager takes them: unique names, valid policies, and the pool
/// of the single-backend mode (whose queue the server search matches) alone.
fn check_pools(pools: &[Pool]) -> Result<()> {
    let invalid = |message: String| Err(Error::InvalidConfig(message));
    if pools.len() != 1 && pools.iter().any(|p| p.policy.is_single_backend()) {
        return invalid(format!(
            "the single-backend mode has one pool, not {}",
            pools.len()
        ));
    }
    let mut names = HashSet::new();
    for pool in pools {
        pool.policy.validate().map_err(Error::InvalidConfig)?;
        let name = pool.policy.name.as_str();
        if !names.insert(name) {
            return invalid(format!("two pools are named {name}"));
        }
    }
    Ok(())
}
