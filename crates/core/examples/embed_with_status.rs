//! Embedding the manager loop with `codalab-wm-core` alone: a custom backend (here an
//! in-memory "cluster" that only records the `cl-worker` command lines it was asked to run)
//! plugged into [`Manager`], and the program's own status endpoint built from what the loop
//! publishes: the status snapshot ([`Manager::subscribe_status`]) and the event stream
//! ([`Manager::subscribe_events`]). No HTTP framework: a plain tokio `TcpListener` answers
//! every request with a few lines of text. (`cl-worker-manager`'s page, metrics and terminal
//! view are `codalab-wm-app`'s; an embedder chooses its own.)
//!
//! ```text
//! CODALAB_SERVER=http://127.0.0.1:2900 CODALAB_USERNAME=codalab CODALAB_PASSWORD=... \
//!     cargo run -p codalab-wm-core --example embed_with_status
//! curl http://127.0.0.1:9184/
//! ```
//!
//! Ctrl-C stops the loop (the tick in flight is cancelled) and the endpoint.

use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::events::Event;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::status::Status;
use codalab_wm_core::{
    JobState, LaunchRequest, Manager, ManagerConfig, Pool, Result, SingleBackendFlags,
    WorkerBackend, WorkerJob, WorkerOptions, WorkerShape, async_trait,
};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch};

/// Events the endpoint shows, newest last.
const KEPT_EVENTS: usize = 10;

/// A cluster that accepts every job and keeps it pending: swap `start_worker_job` for your
/// platform's submit call and `get_worker_jobs` for its listing.
#[derive(Debug, Default)]
struct MyCluster {
    jobs: Mutex<Vec<WorkerJob>>,
}

#[async_trait]
impl WorkerBackend for MyCluster {
    fn name(&self) -> &str {
        "my-cluster"
    }

    fn worker_shape(&self) -> WorkerShape {
        WorkerShape::from_flags(4, 0, 16 * 1024)
    }

    async fn get_worker_jobs(&self) -> Result<Vec<WorkerJob>> {
        Ok(self.jobs.lock().expect("jobs lock").clone())
    }

    async fn start_worker_job(&self, request: &LaunchRequest<'_>) -> Result<WorkerJob> {
        let argv = request
            .worker
            .build_command(request.unique, "/scratch/workdir");
        println!("my-cluster: would run {}", argv.join(" "));
        let job = WorkerJob::new(request.unique, JobState::Pending);
        self.jobs.lock().expect("jobs lock").push(job.clone());
        Ok(job)
    }
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let credentials = Credentials {
        username: env("CODALAB_USERNAME", "codalab"),
        password: Secret::new(env("CODALAB_PASSWORD", "")),
    };
    let server = env("CODALAB_SERVER", "http://127.0.0.1:2900");
    let client = CodaLabClient::new(&server, credentials)?;
    let pool = Pool::single_backend(
        &SingleBackendFlags::default(),
        Arc::new(MyCluster::default()),
        WorkerOptions::default().for_server(&server),
    );
    let mut manager = Manager::new(ManagerConfig::default(), client, pool);

    let events = Arc::new(Mutex::new(VecDeque::new()));
    tokio::spawn(keep_events(manager.subscribe_events(), events.clone()));
    let listener = TcpListener::bind(env("STATUS_ADDR", "127.0.0.1:9184")).await?;
    println!("status on http://{}/", listener.local_addr()?);
    tokio::spawn(serve(listener, manager.subscribe_status(), events));

    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = stop.send(true);
        }
    });
    let outcome = manager.run(false, stopped).await?;
    println!("the loop ended: {outcome:?}");
    Ok(())
}

/// Keeps the last [`KEPT_EVENTS`] events of the stream (one that lagged loses the oldest).
async fn keep_events(mut stream: broadcast::Receiver<Event>, kept: Arc<Mutex<VecDeque<Event>>>) {
    loop {
        match stream.recv().await {
            Ok(event) => {
                let mut kept = kept.lock().expect("events lock");
                if kept.len() == KEPT_EVENTS {
                    kept.pop_front();
                }
                kept.push_back(event);
            }
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Answers every connection with [`page`], whatever it asked.
async fn serve(
    listener: TcpListener,
    status: watch::Receiver<Status>,
    events: Arc<Mutex<VecDeque<Event>>>,
) {
    while let Ok((mut socket, _)) = listener.accept().await {
        let body = page(&status.borrow(), &events.lock().expect("events lock"));
        tokio::spawn(async move {
            let mut request = [0_u8; 1024];
            let _ = socket.read(&mut request).await;
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(reply.as_bytes()).await;
        });
    }
}

/// The status in a few lines: the last tick, each pool's jobs and decision, the last events.
fn page(status: &Status, events: &VecDeque<Event>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ticks {} · staged {} · last error {}",
        status.ticks,
        status.staged,
        status.last_error.as_deref().unwrap_or("none")
    );
    for pool in &status.pools {
        let decision = pool.last_decision.as_ref().map(|d| {
            let reasons: Vec<String> = d.reasons.iter().map(ToString::to_string).collect();
            format!(
                "launch {}, stop {}: {}",
                d.launches,
                d.stops.len(),
                reasons.join("; ")
            )
        });
        let _ = writeln!(
            out,
            "pool {}: {} active, {} pending (min {}, max {}); last decision: {}",
            pool.name,
            pool.active,
            pool.pending,
            pool.min,
            pool.max,
            decision.as_deref().unwrap_or("none yet")
        );
    }
    for event in events {
        let _ = writeln!(out, "{} {}", event.at_seconds, event.message);
    }
    out
}
