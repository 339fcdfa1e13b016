//! Budget use across restarts as a property (review §6): over random sequences of launches,
//! metering and ends of the process (a clean exit, a SIGKILL at any point: before a launch's
//! submit, just after it, between ticks), the use the launch record holds on disk never falls
//! below the use made. The "process" is a pool's [`PoolRuntime`] (its budget use and launch
//! record) opened on one record dir, dropped to die; its clock is passed in, as the manager's.
//!
//! The use made: each worker costs the larger of its minimum life (a launch commits it, and
//! the launch gate reserves it) and its active time, metered as the manager meters it (a job
//! active at the end of an interval was active through it).

use super::*;
use crate::WorkerShape;
use crate::backend::WorkerJob;
use crate::command::WorkerOptions;
use crate::engine::PoolSpec;
use crate::engine::record::LaunchRecord;
use crate::pools::PoolPolicy;
use proptest::prelude::*;
use std::path::Path;

const LIFE: u64 = 300;
const IDENTITY: &str = "fake budget-props";
/// The Unix time of the world's zero.
const EPOCH: Duration = Duration::from_secs(1_800_000_000);

#[derive(Debug, Clone)]
enum Step {
    /// Time passes (seconds), jobs change state (index, active or ended), and a tick meters.
    Tick(u64, Vec<(usize, bool)>),
    /// A launch; the process is killed before the submit, after it, or not.
    Launch(Crash),
    /// A launch whose submit fails.
    LaunchFails,
    /// `Manager::run` returns (restart, shutdown, error): the use is saved, the process ends.
    Exit,
    /// SIGKILL: the process is dropped.
    Kill,
}

#[derive(Debug, Clone, Copy)]
enum Crash {
    None,
    BeforeSubmit,
    AfterSubmit,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u64..600, prop::collection::vec((0usize..8, any::<bool>()), 0..4))
            .prop_map(|(dt, changes)| Step::Tick(dt, changes)),
        3 => prop_oneof![Just(Crash::None), Just(Crash::BeforeSubmit), Just(Crash::AfterSubmit)]
            .prop_map(Step::Launch),
        1 => Just(Step::LaunchFails),
        1 => Just(Step::Exit),
        1 => Just(Step::Kill),
    ]
}

/// A live process: its pool runtime and when (world time) it started. Its record is opened
/// without the lock: this test's processes run one at a time by construction, and a child of
/// another test, between its fork and its exec, can hold a closed record's lock for a moment
/// (CI saw it once); the lock is `record/tests.rs`'s to test.
struct Process {
    runtime: PoolRuntime,
    started: Duration,
}

impl Process {
    fn start(dir: &Path, now: Duration) -> Self {
        let pool = PoolSpec {
            policy: PoolPolicy::new("cpu", WorkerShape::from_flags(1, 0, 8192)),
            backend: "fake".to_owned(),
            worker: WorkerOptions {
                idle_seconds: LIFE,
                ..WorkerOptions::default()
            },
        };
        let mut runtime = PoolRuntime::new(pool);
        runtime.take_record(
            LaunchRecord::open_unlocked(dir, IDENTITY).unwrap(),
            EPOCH + now,
        );
        Self {
            runtime,
            started: now,
        }
    }

    /// A process started at `now` after its first tick (a manager meters before it launches).
    fn started(dir: &Path, jobs: &[Job], now: Duration) -> Self {
        let mut p = Self::start(dir, now);
        p.tick(jobs, now);
        p
    }

    /// A tick at `now`: the listing taken in, the use metered.
    fn tick(&mut self, jobs: &[Job], now: Duration) {
        let (clock, start) = self.clock(now);
        self.runtime.listed = jobs.iter().enumerate().map(|(i, j)| j.listed(i)).collect();
        self.runtime.meter(clock, start, true);
    }

    /// The manager clock at world time `now`, and its zero as Unix time.
    fn clock(&self, now: Duration) -> (Duration, Duration) {
        (now - self.started, EPOCH + self.started)
    }
}

/// A job of the world: its launch unique, whether it runs, its metered active seconds.
struct Job {
    unique: String,
    active: bool,
    ended: bool,
    used: f64,
}

impl Job {
    fn listed(&self, index: usize) -> WorkerJob {
        let state = match (self.ended, self.active) {
            (true, _) => JobState::Ended,
            (false, true) => JobState::Active,
            (false, false) => JobState::Pending,
        };
        WorkerJob {
            name: format!("fake-worker-{}", self.unique),
            ..WorkerJob::new(index.to_string(), state)
        }
    }
}

/// The use the record in `dir` holds, as a process starting at `now` reads it (seconds).
fn recorded(dir: &Path, now: Duration) -> f64 {
    let record = LaunchRecord::read_only(dir, IDENTITY).unwrap();
    let window = crate::budget::UsageWindow::from_unix(record.usage(), EPOCH + now);
    window.worker_hours(Duration::ZERO) * 3600.0
}

fn run(steps: &[Step]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut now = Duration::ZERO;
    let mut jobs: Vec<Job> = Vec::new();
    let mut process: Option<Process> = None;
    let mut launches = 0u32;
    for (n, step) in steps.iter().enumerate() {
        match step {
            Step::Tick(dt, changes) => {
                now += Duration::from_secs(*dt);
                for &(index, active) in changes {
                    let count = jobs.len();
                    if let Some(job) = jobs.get_mut(index % count.max(1))
                        && !job.ended
                    {
                        job.ended = !active && job.active;
                        job.active = active;
                    }
                }
                for job in jobs.iter_mut().filter(|j| j.active && !j.ended) {
                    job.used += *dt as f64;
                }
                let p = process.get_or_insert_with(|| Process::started(dir.path(), &jobs, now));
                p.tick(&jobs, now);
            }
            Step::Launch(crash) => {
                let p = process.get_or_insert_with(|| Process::started(dir.path(), &jobs, now));
                let (clock, start) = p.clock(now);
                launches += 1;
                let unique = format!("{launches:032x}");
                p.runtime.launching(&unique, clock, start);
                if let Crash::BeforeSubmit = crash {
                    process = None;
                    continue;
                }
                jobs.push(Job {
                    unique,
                    active: false,
                    ended: false,
                    used: 0.0,
                });
                if let Crash::AfterSubmit = crash {
                    process = None;
                }
            }
            Step::LaunchFails => {
                let p = process.get_or_insert_with(|| Process::started(dir.path(), &jobs, now));
                let (clock, start) = p.clock(now);
                launches += 1;
                let unique = format!("{launches:032x}");
                p.runtime.launching(&unique, clock, start);
                p.runtime.launch_failed(&unique, clock, start);
            }
            Step::Exit => {
                if let Some(mut p) = process.take() {
                    let (clock, start) = p.clock(now);
                    p.runtime.save_use(clock, start);
                }
            }
            Step::Kill => process = None,
        }
        let made: f64 = jobs.iter().map(|j| j.used.max(LIFE as f64)).sum();
        let on_disk = recorded(dir.path(), now);
        prop_assert!(
            on_disk >= made - 1e-6,
            "after step {n} ({step:?}): the record holds {on_disk} worker-seconds, {made} were used"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn the_recorded_use_never_falls_below_the_use_made(
        steps in prop::collection::vec(step(), 1..40)
    ) {
        run(&steps)?;
    }
}

/// A launch whose submit fails takes its reservation back (no job, no use).
#[test]
fn a_failed_submit_takes_its_reservation_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Process::start(dir.path(), Duration::ZERO);
    p.runtime
        .launching("0123456789abcdef0123456789abcdef", Duration::ZERO, EPOCH);
    assert_eq!(recorded(dir.path(), Duration::ZERO), LIFE as f64);
    p.runtime
        .launch_failed("0123456789abcdef0123456789abcdef", Duration::ZERO, EPOCH);
    assert_eq!(recorded(dir.path(), Duration::ZERO), 0.0);
}
