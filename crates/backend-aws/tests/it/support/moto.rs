//! The moto helpers the AWS Batch tests share: moto on 127.0.0.1 (`cargo xtask services up
//! moto`, its docker stub and seeded queues), the real aws-sdk-batch client configured for
//! it, and backends with fresh manager ids so runs do not see each other.

#![allow(dead_code)] // each test binary uses its own part

use codalab_wm_aws::client::sdk_loader;
use codalab_wm_aws::{AwsBatchBackend, AwsBatchConfig, BatchClient, HostEnvironment};
use codalab_wm_core::backend::new_unique;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::Polling;
use codalab_wm_core::{LaunchRequest, WorkerBackend, WorkerJob, WorkerOptions};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub const PASSWORD: &str = "moto-test-password-3141";
pub const SECRET_ARN: &str =
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:codalab-creds-AbCdEf";
pub const ROLE_ARN: &str = "arn:aws:iam::123456789012:role/ecsTaskExecutionRole";

pub fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| "http://127.0.0.1:5055".to_owned())
}

pub fn endpoint_address() -> String {
    endpoint()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

pub fn docker_stub_socket() -> PathBuf {
    let services = codalab_wm_core::testing::services_dir();
    services.join("moto/docker.sock")
}

/// Whether moto answers and the docker stub is there.
pub fn moto_available() -> bool {
    let answers = endpoint_address()
        .parse()
        .ok()
        .and_then(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok())
        .is_some();
    answers && docker_stub_socket().exists()
}

/// One HTTP/1.1 request over `stream`; returns the status code and the body.
pub fn http(mut stream: impl Read + Write, method: &str, path: &str, body: &str) -> (u16, String) {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .expect("sending a request");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("reading a reply");
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A POST to moto's own API (`/moto-api/…`); the error says what moto answered.
pub fn moto_api(path: &str, body: &str) -> Result<(), String> {
    let stream =
        TcpStream::connect(endpoint_address()).map_err(|e| format!("connecting to moto: {e}"))?;
    match http(stream, "POST", path, body) {
        (200..=299, _) => Ok(()),
        (status, reply) => Err(format!("moto answered {status} to {path}: {reply}")),
    }
}

/// A request to the docker stub's control API (`/stub/…`).
pub fn docker_stub(path: &str, body: &str) -> String {
    let stream = UnixStream::connect(docker_stub_socket()).expect("connecting to the docker stub");
    let (status, reply) = http(stream, "POST", path, body);
    assert_eq!(status, 200, "docker stub {path}: {reply}");
    reply
}

pub fn credentials() -> Credentials {
    Credentials {
        username: "moto-user".into(),
        password: Secret::new(PASSWORD),
    }
}

pub fn worker() -> WorkerOptions {
    WorkerOptions {
        server: "http://127.0.0.1:9".into(),
        ..WorkerOptions::default()
    }
}

/// A config whose manager id and job definition name are new, so runs do not see each other.
pub fn fresh_config() -> AwsBatchConfig {
    let name = format!("wmtest-{}", &new_unique()[..12]);
    AwsBatchConfig {
        job_definition_name: name.clone(),
        manager_id: Some(name),
        ..AwsBatchConfig::default()
    }
}

/// The SDK configuration for moto: the backend's loader, moto's endpoint, test credentials.
pub async fn sdk_config(config: &AwsBatchConfig) -> aws_config::SdkConfig {
    let credentials = aws_sdk_batch::config::Credentials::new("test", "test", None, None, "test");
    sdk_loader(config)
        .endpoint_url(endpoint())
        .credentials_provider(credentials)
        .load()
        .await
}

pub async fn sdk_client(config: &AwsBatchConfig) -> aws_sdk_batch::Client {
    aws_sdk_batch::Client::new(&sdk_config(config).await)
}

pub async fn backend(config: &AwsBatchConfig) -> AwsBatchBackend {
    let client = BatchClient::new(&sdk_config(config).await);
    let host = HostEnvironment::default();
    AwsBatchBackend::with_client(config.clone(), &worker(), &credentials(), host, client)
        .expect("a valid test config")
}

pub async fn launch(backend: &AwsBatchBackend) -> WorkerJob {
    let unique = new_unique();
    let worker = worker();
    backend
        .start_worker_job(&LaunchRequest {
            unique: &unique,
            worker: &worker,
            dry_run: false,
        })
        .await
        .unwrap()
}

/// Terminates every job of `backend` that still counts as a worker.
pub async fn clean_up(backend: &AwsBatchBackend) {
    for job in backend.get_worker_jobs().await.unwrap_or_default() {
        if job.state.is_capacity() {
            let _ = backend.stop_worker_job(&job).await;
        }
    }
}

/// How the tests wait for moto to move a job: its docker stub and state manager take a few
/// requests per status.
pub const POLLING: Polling = Polling {
    interval: Duration::from_millis(250),
    attempts: 120,
};

/// Job `id` of `backend` once it no longer counts as a worker (at most [`POLLING`]).
pub async fn ended(backend: &AwsBatchBackend, id: &str) -> WorkerJob {
    codalab_wm_core::testing::wait_for_job(backend, id, POLLING, "ended", |j| {
        j.is_some_and(|j| !j.state.is_capacity())
    })
    .await
    .unwrap()
    .unwrap()
}

/// moto's state manager is one per server, and the tests of a binary run at once: a
/// transition one test sets holds every test's new jobs, and unsetting it lets them all move
/// (in CI a conformance run let go of the jobs `moto_fallback` held). A test whose jobs must
/// move takes it shared ([`jobs_move`]); a test that holds jobs takes it alone
/// ([`StateManager::alone`]).
static STATE_MANAGER: RwLock<()> = RwLock::const_new(());

/// moto moves this test's jobs as it always does while the guard lives: no test holds them.
pub async fn jobs_move() -> RwLockReadGuard<'static, ()> {
    STATE_MANAGER.read().await
}

/// moto's state manager for one test alone; when dropped, also on a failed assertion, new
/// jobs move again.
pub struct StateManager(RwLockWriteGuard<'static, ()>);

impl StateManager {
    /// Waits until no other test relies on the state manager.
    pub async fn alone() -> Self {
        Self(STATE_MANAGER.write().await)
    }

    /// Holds moto's new Batch jobs in SUBMITTED: its state manager then needs a million steps
    /// per status.
    pub fn hold(&self) {
        moto_api(
            "/moto-api/state-manager/set-transition",
            r#"{"model_name":"batch::job","transition":{"progression":"manual","times":1000000}}"#,
        )
        .unwrap();
    }

    pub fn release(&self) -> Result<(), String> {
        moto_api(
            "/moto-api/state-manager/unset-transition",
            r#"{"model_name":"batch::job"}"#,
        )
    }
}

impl Drop for StateManager {
    fn drop(&mut self) {
        if let Err(err) = self.release() {
            eprintln!("could not release held jobs: {err}");
        }
    }
}
