//! `bench-ours --server-cost …`: ticks against the REAL CodaLab server, with the server's CPU
//! read around them (`server_cpu.rs`); the harness's `server_cost.rs` runs it.
//!
//! Two kinds of tick:
//! - our manager's (default): core's [`Manager`] with the real [`CodaLabClient`] logged in as
//!   `--user`, upstream's defaults (compat, min 1, `--max-workers M`) and a [`FakeBackend`]
//!   listing `--jobs J` jobs (half pending, half active; `J = M`, so no tick launches);
//!   `--count-every-tick` makes the client count at every tick (a queue that moves), else a
//!   steady queue reuses its count (the default);
//! - `--replay QUERY` (repeatable): each tick sends these `GET /rest/bundles?QUERY` requests,
//!   for reference costs.
//!
//! After `--warmup` ticks (login, the first count), ticks run back to back until `--seconds`
//! have passed and at least `--min-ticks` ran. Prints one JSON line: ticks, wall time, the
//! server's CPU over them, our own CPU per tick, requests and bundles read per tick.

use crate::args::{flag, required};
use crate::ours::backend_with_jobs;
use crate::server_cpu::{cpu_ms, parse_pids};
use crate::stats::{ms, process_cpu, summarize};
use anyhow::{Context, Result, ensure};
use codalab_wm_core::codalab::{ClientOptions, CodaLabClient, CountEvery};
use codalab_wm_core::policy::PolicyConfig;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::{Manager, ManagerConfig, Pool, SingleBackendFlags, WorkerOptions};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

struct Setup {
    server: String,
    user: String,
    password: String,
    pids: Vec<u32>,
    seconds: f64,
    min_ticks: usize,
    warmup: usize,
}

/// What one tick did: requests sent, bundles read (none for replayed requests).
struct Tick {
    requests: usize,
    read: Option<usize>,
}

/// The ticking side.
enum Side {
    Manager(Box<Manager>),
    Replay {
        http: reqwest::Client,
        token: String,
        queries: Vec<String>,
    },
}

impl Side {
    async fn tick(&mut self, server: &str) -> Result<Tick> {
        match self {
            Side::Manager(manager) => {
                let report = manager.tick().await?;
                ensure!(report.launched.is_empty(), "a steady-state tick launched");
                Ok(Tick {
                    requests: report.search_requests,
                    read: Some(report.read),
                })
            }
            Side::Replay {
                http,
                token,
                queries,
            } => {
                for query in queries.iter() {
                    http.get(format!("{server}/rest/bundles?{query}"))
                        .header("X-Requested-With", "XMLHttpRequest")
                        .bearer_auth(&*token)
                        .send()
                        .await?
                        .error_for_status()?
                        .bytes()
                        .await?;
                }
                Ok(Tick {
                    requests: queries.len(),
                    read: None,
                })
            }
        }
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let setup = Setup {
        server: required(args, "--server")?,
        user: required(args, "--user")?,
        password: required(args, "--password")?,
        pids: parse_pids(&required::<String>(args, "--server-pids")?)?,
        seconds: flag(args, "--seconds")?.unwrap_or(5.0),
        min_ticks: flag(args, "--min-ticks")?.unwrap_or(10),
        warmup: flag(args, "--warmup")?.unwrap_or(2),
    };
    let replay: Vec<String> = args
        .windows(2)
        .filter(|w| w[0] == "--replay")
        .map(|w| w[1].clone())
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut side = if replay.is_empty() {
            let max_workers: u32 = required(args, "--max-workers")?;
            let jobs: usize = required(args, "--jobs")?;
            let every_tick = args.iter().any(|a| a == "--count-every-tick");
            Side::Manager(Box::new(manager(&setup, max_workers, jobs, every_tick)?))
        } else {
            let (http, token) = login(&setup).await?;
            Side::Replay {
                http,
                token,
                queries: replay,
            }
        };
        measure(&setup, &mut side).await
    })
}

fn manager(setup: &Setup, max_workers: u32, jobs: usize, every_tick: bool) -> Result<Manager> {
    let options = ClientOptions {
        count_every: if every_tick {
            CountEvery::ALWAYS
        } else {
            CountEvery::default()
        },
        ..ClientOptions::default()
    };
    let credentials = Credentials {
        username: setup.user.clone(),
        password: Secret::new(setup.password.clone()),
    };
    let client = CodaLabClient::with_options(&setup.server, credentials, &options)?;
    let flags = SingleBackendFlags {
        limits: PolicyConfig {
            max_workers,
            ..PolicyConfig::default()
        },
        ..SingleBackendFlags::default()
    };
    let worker = WorkerOptions {
        server: setup.server.clone(),
        ..WorkerOptions::default()
    };
    let pool = Pool::single_backend(&flags, Arc::new(backend_with_jobs(jobs)), worker);
    Ok(Manager::new(ManagerConfig::default(), client, pool))
}

/// A REST session of `--user` (gunicorn drops idle keep-alives: no reuse).
async fn login(setup: &Setup) -> Result<(reqwest::Client, String)> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    let token: serde_json::Value = http
        .post(format!("{}/rest/oauth2/token", setup.server))
        .basic_auth("codalab_cli_client", Some(""))
        .form(&[
            ("grant_type", "password"),
            ("username", setup.user.as_str()),
            ("password", setup.password.as_str()),
        ])
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let token = token["access_token"]
        .as_str()
        .context("no access_token in the login reply")?
        .to_owned();
    Ok((http, token))
}

/// Warm-up ticks, then measured ticks with the server's CPU read before and after.
async fn measure(setup: &Setup, side: &mut Side) -> Result<()> {
    for _ in 0..setup.warmup {
        side.tick(&setup.server).await?;
    }
    let (mut own, mut requests, mut read) = (Vec::new(), 0, Some(0));
    let server_before = cpu_ms(&setup.pids)?;
    let started = Instant::now();
    while own.len() < setup.min_ticks || started.elapsed().as_secs_f64() < setup.seconds {
        let c0 = process_cpu();
        let done = side.tick(&setup.server).await?;
        own.push(ms(process_cpu() - c0));
        requests += done.requests;
        read = read.zip(done.read).map(|(a, b)| a + b);
    }
    let wall = started.elapsed().as_secs_f64();
    let server = cpu_ms(&setup.pids)? - server_before;
    let ticks = own.len() as f64;
    println!(
        "{}",
        json!({
            "ticks": own.len(), "wall_s": wall, "server_cpu_ms": server,
            "own_cpu": summarize(&own).json(),
            "requests_per_tick": requests as f64 / ticks,
            "read_per_tick": read.map(|r| r as f64 / ticks),
        })
    );
    Ok(())
}
