//! The simulator and the manager run one tick engine; this proves their drivers agree. A
//! workload runs through `simulate_traced` (its platforms and server simulated), and each
//! tick's inputs are replayed into the real [`Manager`]: its I/O against the fake CodaLab
//! server (`codalab_wm_fake_codalab`, serving the staged bundles and the worker list the
//! simulator's engine saw, and each owner's `parallel_run_quota` of 2) and backends that list
//! the simulator's jobs and answer each launch as its platform did. At every tick the manager
//! must launch and stop what the simulator did, for the same reasons.
//!
//! The scenario has what the engine decides with: packing on the server's dispatch model
//! (4-CPU workers, bundles of 1 and 2 CPUs), owners' quotas, spill by estimated wait, a Spot
//! pool whose platform runs out of capacity and falls back, and a budget on the on-demand pool.
//! Job and worker ids differ only by their launch unique (the manager draws its own), mapped
//! launch by launch.

use codalab_wm_core::backend::{JobState, LaunchRequest, WorkerBackend, WorkerJob};
use codalab_wm_core::budget::BudgetLimits;
use codalab_wm_core::checkin::launch_unique;
use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::pools::fallback::Fallback;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::simulate::{Platform, SimConfig, TickTrace, Workload, simulate_traced};
use codalab_wm_core::{Error, Manager, ManagerConfig, Pool, PoolPolicy, Result, WorkerShape};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab, user_id};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const S: fn(u64) -> Duration = Duration::from_secs;

/// A platform replayed: it lists what the simulator's did and answers each launch as it did.
#[derive(Debug)]
struct Replayed {
    name: &'static str,
    shape: WorkerShape,
    state: Mutex<Replay>,
}

#[derive(Debug, Default)]
struct Replay {
    jobs: Vec<WorkerJob>,
    /// This tick's launches as the simulated platform answered them: a job, or no capacity.
    answers: VecDeque<bool>,
    /// The manager's launch uniques, in order.
    launched: Vec<String>,
}

#[codalab_wm_core::async_trait]
impl WorkerBackend for Replayed {
    fn name(&self) -> &str {
        self.name
    }
    fn worker_shape(&self) -> WorkerShape {
        self.shape
    }
    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        Ok(self.state.lock().unwrap().jobs.clone())
    }
    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        let mut state = self.state.lock().unwrap();
        match state.answers.pop_front() {
            Some(true) => {
                state.launched.push(request.unique.to_owned());
                let id = format!("{}-{}", self.name, request.unique);
                Ok(WorkerJob::new(id, JobState::Pending))
            }
            // A launch the simulated platform refused, in its words.
            Some(false) => Err(Error::NoCapacity {
                backend: "simulated".to_owned(),
                message: "stockout".to_owned(),
            }),
            // The decisions differ: the comparison after the tick says how.
            None => Err(Error::NoCapacity {
                backend: self.name.to_owned(),
                message: "a launch the simulator did not make".to_owned(),
            }),
        }
    }
    async fn stop_worker_job(&self, _job: &WorkerJob) -> Result<()> {
        Ok(())
    }
}

fn policy(name: &str, cost: f64, max: u32) -> PoolPolicy {
    PoolPolicy {
        max,
        cost,
        cost_per_hour: Some(cost),
        min_seconds_between_workers: 0,
        max_launches_per_tick: 4,
        ..PoolPolicy::new(name, WorkerShape::from_flags(4, 0, 16 * 1024))
    }
}

fn scenario() -> (Workload, Vec<PoolPolicy>, SimConfig) {
    let mut csv = String::from("time,cpus,duration,owner\n");
    for n in 0..60u64 {
        let (cpus, owner) = (1 + n % 2, if n % 5 == 0 { "carol" } else { "alice" });
        let at = (n / 12) * 1500 + (n % 12) * 7;
        csv.push_str(&format!("{at},{cpus},{},{owner}\n", 300 + (n * 37) % 900));
    }
    let workload = Workload::parse(&csv).unwrap();
    let spot = PoolPolicy {
        spill_after: Some(S(300)),
        fallback: Some(Fallback {
            after: 1,
            window: S(600),
            cooldown: S(900),
            ..Fallback::to("ondemand")
        }),
        ..policy("spot", 0.3, 4)
    };
    let ondemand = PoolPolicy {
        budget: BudgetLimits {
            max_worker_hours_per_day: Some(3.0),
            max_cost_per_day: None,
        },
        ..policy("ondemand", 1.0, 4)
    };
    let spot_platform = Platform {
        start_latency: Some((S(60), S(120))),
        stockout: Some((S(3600), S(1200))),
        ..Platform::default()
    };
    let config = SimConfig {
        worker_idle: S(300),
        drain: S(2 * 3600),
        quotas: [("alice".to_owned(), 2), ("carol".to_owned(), 2)].into(),
        platforms: [("spot".to_owned(), spot_platform)].into(),
        ..SimConfig::default()
    };
    (workload, vec![spot, ondemand], config)
}

/// Replaces the simulator's launch unique at the end of `id` by the manager's.
fn mapped(id: &str, uniques: &HashMap<String, String>) -> String {
    match launch_unique(id).and_then(|u| uniques.get(u).map(|m| (u, m))) {
        Some((unique, manager)) => format!("{}{manager}", &id[..id.len() - unique.len()]),
        None => id.to_owned(),
    }
}

/// The fake server's view of one simulated tick: the staged bundles the simulator's search
/// returned, its workers (the simulated manager runs as `codalab`, the root user).
fn serve(server: &FakeCodaLab, tick: &TickTrace, uniques: &HashMap<String, String>) {
    let bundles = (tick.staged.iter())
        .map(|b| FakeBundle {
            uuid: b.uuid.clone(),
            owner: b.owner_id.clone().unwrap_or_default(),
            cpus: b.request_cpus,
            gpus: b.request_gpus,
            memory: format!("{}", b.request_memory),
            queue: b.request_queue.clone(),
            tags: Vec::new(),
        })
        .collect();
    server.set_bundles(bundles);
    let running = (tick.run_owners.iter())
        .map(|(uuid, owner)| FakeBundle {
            uuid: uuid.clone(),
            ..FakeBundle::new(owner, 0)
        })
        .collect();
    server.set_running(running);
    let workers = (tick.workers.iter())
        .map(|w| {
            let mut value = serde_json::to_value(w).unwrap();
            value["worker_id"] = mapped(&w.worker_id, uniques).into();
            value["user_id"] = user_id("codalab").into();
            value
        })
        .collect();
    server.set_workers(workers);
}

#[tokio::test]
async fn the_manager_decides_as_the_simulation_tick_by_tick() {
    let (workload, policies, config) = scenario();
    let (report, ticks) = simulate_traced(&workload, &policies, &config).unwrap();
    let spot = &report.pools[0];
    // The scenario reaches what it is meant to cover.
    assert!(
        spot.failures > 0 && report.pools[1].launches > 0,
        "{report:?}"
    );
    let codes: std::collections::BTreeSet<&str> = (ticks.iter())
        .flat_map(|t| t.pools.iter().flat_map(|p| p.reasons.iter().copied()))
        .collect();
    for code in ["packed", "budget_reached", "backing_off", "on_fallback"] {
        assert!(codes.contains(code), "{code} in {codes:?}");
    }
    let spilled = (ticks.iter()).any(|t| t.decision.assignments.iter().any(|a| a.spill.is_some()));
    let quota = (ticks.iter()).any(|t| format!("{:?}", t.decision.unserved).contains("quota"));
    assert!(spilled && quota, "spill {spilled}, quota {quota}");

    let server = FakeCodaLab::start().await.unwrap();
    let credentials = Credentials {
        username: "codalab".into(),
        password: Secret::new("codalab"),
    };
    let client = CodaLabClient::new(&server.url(), credentials).unwrap();
    let backends: Vec<Arc<Replayed>> = (policies.iter())
        .map(|p| {
            let name: &'static str = Box::leak(p.name.clone().into_boxed_str());
            Arc::new(Replayed {
                name,
                shape: p.shape,
                state: Mutex::default(),
            })
        })
        .collect();
    let pools = (policies.iter().zip(&backends))
        .map(|(policy, backend)| Pool {
            policy: policy.clone(),
            backend: backend.clone(),
            worker: codalab_wm_core::WorkerOptions {
                idle_seconds: config.worker_idle.as_secs(),
                ..Default::default()
            },
        })
        .collect();
    let manager_config = ManagerConfig {
        sleep_time: config.sleep_time,
        ..ManagerConfig::default()
    };
    let mut manager = Manager::with_pools(manager_config, client, pools).unwrap();
    manager.stop_clock();
    // The manager's clock read a little past zero when stopped: the replay keeps that offset.
    let offset = manager.clock();
    let mut uniques: HashMap<String, String> = HashMap::new();
    let mut compared = 0;
    for tick in &ticks {
        manager.advance_clock((tick.at + offset).saturating_sub(manager.clock()));
        serve(&server, tick, &uniques);
        for (backend, pool) in backends.iter().zip(&tick.pools) {
            let mut state = backend.state.lock().unwrap();
            state.jobs = (pool.listing.iter())
                .map(|job| WorkerJob {
                    id: mapped(&job.id, &uniques),
                    ..job.clone()
                })
                .collect();
            state.answers = pool.launches.iter().map(Result::is_ok).collect();
            state.launched.clear();
        }
        let report = manager.tick().await.unwrap();
        let at = tick.at.as_secs();
        // The whole decision: launches, stops, reasons, assignments (spill), unserved bundles
        // (quota) and unmet demand, in the simulator's names.
        let mut ours = format!("{:#?}", report.pools);
        for owner in ["alice", "carol", "codalab"] {
            ours = ours.replace(&user_id(owner), owner);
        }
        let mut theirs = format!("{:#?}", tick.decision);
        for (simulated, manager) in &uniques {
            theirs = theirs.replace(simulated, manager);
        }
        if let Some((n, (a, b))) =
            (ours.lines().zip(theirs.lines()).enumerate()).find(|(_, (a, b))| a != b)
        {
            panic!(
                "at {at} s the decisions differ at line {n}: manager `{a}`, simulator `{b}`\nmanager:\n{ours}"
            );
        }
        assert_eq!(ours, theirs, "at {at} s");
        for (backend, pool) in backends.iter().zip(&tick.pools) {
            let launched = backend.state.lock().unwrap().launched.clone();
            let simulated = pool.launches.iter().filter_map(|l| l.as_ref().ok());
            for (sim, ours) in simulated.zip(launched) {
                let unique = launch_unique(sim).unwrap().to_owned();
                uniques.insert(unique, ours);
            }
        }
        compared += 1;
    }
    assert_eq!(compared, ticks.len());
    assert!(compared > 1000, "{compared} ticks");
}
