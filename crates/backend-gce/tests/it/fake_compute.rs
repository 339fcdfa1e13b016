//! [`GceBackend`] over real HTTP on 127.0.0.1 against the fake Compute Engine API of
//! `crates/testkit/gce` ([`FakeCompute`]). **No emulator exists for Compute Engine**; the fake
//! checks every request against Google's discovery document (`compute.v1.json`): these tests
//! also assert that every request the backend sent passed those checks.
//!
//! Covered: the core conformance suite (with paging, foreign instances and a service account
//! key file whose JWT the fake verifies), reaping of stopped instances, zone fallback on
//! `ZONE_RESOURCE_POOL_EXHAUSTED`, `down` (dry run and real, waiting for the operations),
//! throttling and 5xx answers, and the metadata server's token.

use codalab_wm_core::down::down_pool;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::{Harness, Polling, run_conformance};
use codalab_wm_core::{Error, JobState, LaunchRequest, WorkerBackend, WorkerJob, WorkerOptions};
use codalab_wm_fake_gce::{FakeCompute, Fault, RecordedRequest};
use codalab_wm_gce::{GceBackend, GceConfig};
use std::sync::Arc;
use std::time::Duration;

const PROJECT: &str = "test-project";
const ZONE_A: &str = "us-central1-a";
const ZONE_B: &str = "us-central1-b";

pub fn credentials() -> Credentials {
    Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    }
}

/// A config against `fake`, authenticated by its metadata server.
pub fn config(fake: &FakeCompute) -> GceConfig {
    let mut config = GceConfig::new(PROJECT, &[ZONE_A, ZONE_B], "codalab-password");
    config.api_endpoint = fake.api_url();
    config.metadata_url = Some(fake.url().to_owned());
    config.operation_timeout_seconds = 5;
    config
}

fn backend(config: &GceConfig) -> GceBackend {
    GceBackend::new(config.clone(), &credentials()).expect("valid config")
}

async fn start(backend: &GceBackend, unique: &str) -> codalab_wm_core::Result<WorkerJob> {
    let options = WorkerOptions::default();
    backend
        .start_worker_job(&LaunchRequest {
            unique,
            worker: &options,
            dry_run: false,
        })
        .await
}

/// Every API request passed the discovery document's checks (auth requests aside).
fn assert_all_valid(requests: &[RecordedRequest]) {
    for request in requests {
        assert!(request.rejection.is_none(), "rejected: {request:?}");
        if request.path.starts_with("/compute/") {
            assert!(request.method_id.is_some(), "not a method: {request:?}");
        }
    }
}

struct FakeHarness {
    fake: FakeCompute,
    config: GceConfig,
}

#[async_trait::async_trait]
impl Harness for FakeHarness {
    async fn backend(&self) -> Arc<dyn WorkerBackend> {
        Arc::new(backend(&self.config))
    }
    async fn hold_new_jobs(&self) -> bool {
        self.fake.hold_new_instances(true);
        true
    }
    async fn release_jobs(&self) {
        self.fake.release();
    }
    async fn finish_job(&self, job: &WorkerJob) {
        // The worker exited and its startup script powered the instance off.
        self.fake.set_status(&job.id, "TERMINATED");
    }
    fn polling(&self) -> Polling {
        Polling {
            interval: Duration::ZERO,
            attempts: 3,
        }
    }
}

#[tokio::test]
async fn passes_the_conformance_suite_with_a_key_file_paging_and_foreign_instances() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    fake.set_page_size(1);
    let owned = [
        ("codalab-wm-manager", "codalab-wm"),
        ("codalab-wm-pool", "default"),
    ];
    fake.insert_instance(ZONE_A, "cl-worker-earlier", &owned, "RUNNING");
    fake.insert_instance(ZONE_B, "someone-elses-vm", &owned, "RUNNING");
    fake.insert_instance(
        ZONE_A,
        "cl-worker-other-manager",
        &[("codalab-wm-manager", "other")],
        "RUNNING",
    );
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key.json");
    std::fs::write(&key_file, fake.test_key_file()).unwrap();
    let mut config = config(&fake);
    config.metadata_url = None;
    config.credentials_file = Some(key_file.display().to_string());
    let harness = FakeHarness { fake, config };
    run_conformance(&harness).await.unwrap();

    let listed = backend(&harness.config).get_worker_jobs().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|j| j.id.as_str()).collect();
    assert!(names.contains(&"cl-worker-earlier"), "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("cl-worker-") && *n != "cl-worker-other-manager"),
        "{names:?}"
    );
    let requests = harness.fake.requests();
    assert_all_valid(&requests);
    assert!(
        requests
            .iter()
            .any(|r| r.path == "/token" && r.status == 200),
        "JWT grant used"
    );
    assert!(
        requests.iter().any(|r| r.query.contains("pageToken=")),
        "paging used"
    );
}

/// Two deployments with the default `manager_id` and pool against two servers (review 6.3,
/// #28 item 4), on the fake Compute Engine API: neither lists (counts toward max, stops,
/// reaps, deletes in `down`) the other's instances; an instance without an origin label (an
/// older version's) is listed by both and reaped by neither.
#[tokio::test]
async fn another_deployments_instances_are_not_listed_and_unlabelled_ones_are() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    let ours = backend(&config(&fake)).for_server("https://a.example");
    let theirs = backend(&config(&fake)).for_server("https://b.example");
    let mine = start(&ours, "aaaa").await.unwrap();
    let other = start(&theirs, "bbbb").await.unwrap();
    let owned = [
        ("codalab-wm-manager", "codalab-wm"),
        ("codalab-wm-pool", "default"),
    ];
    fake.insert_instance(ZONE_A, "cl-worker-older", &owned, "RUNNING");
    let origin = |name: &str| {
        let instance = fake.instances().into_iter().find(|i| i.name == name);
        instance.unwrap().labels[codalab_wm_gce::spec::ORIGIN_LABEL].clone()
    };
    assert_ne!(origin(&mine.id), origin(&other.id));
    let names = |jobs: Vec<WorkerJob>| {
        let mut names: Vec<String> = jobs.into_iter().map(|j| j.id).collect();
        names.sort();
        names
    };
    let listed = names(ours.get_worker_jobs().await.unwrap());
    assert_eq!(listed, ["cl-worker-aaaa", "cl-worker-older"]);
    let listed = names(theirs.get_worker_jobs().await.unwrap());
    assert_eq!(listed, ["cl-worker-bbbb", "cl-worker-older"]);

    fake.set_status(&mine.id, "STOPPED");
    fake.set_status(&other.id, "STOPPED");
    fake.set_status("cl-worker-older", "STOPPED");
    for _ in 0..3 {
        ours.get_worker_jobs().await.unwrap();
    }
    assert_eq!(ours.take_reaped(), [mine.id.as_str()]);
    let rows = down_pool("default", &ours, false, Duration::from_secs(5)).await;
    assert!(rows.iter().all(|r| !r.failed), "{rows:?}");
    let left: Vec<String> = fake.instances().into_iter().map(|i| i.name).collect();
    assert_eq!(
        left,
        [other.id.as_str()],
        "theirs is left to them by down too"
    );
}

#[tokio::test]
async fn stopped_and_terminated_instances_are_reaped_logged_and_counted() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    let backend = backend(&config(&fake));
    let a = start(&backend, "aaaa").await.unwrap();
    let b = start(&backend, "bbbb").await.unwrap();
    let c = start(&backend, "cccc").await.unwrap();
    fake.set_status(&a.id, "STOPPED");
    fake.set_status(&b.id, "TERMINATED");
    let jobs = backend.get_worker_jobs().await.unwrap();
    let state = |id: &str| jobs.iter().find(|j| j.id == id).map(|j| j.state);
    assert_eq!(state(&a.id), Some(JobState::Ended));
    assert_eq!(state(&b.id), Some(JobState::Ended));
    assert_eq!(state(&c.id), Some(JobState::Active));
    assert_eq!(backend.reaped(), 0, "reported ended first");
    backend.get_worker_jobs().await.unwrap();
    assert_eq!(backend.reaped(), 2);
    let mut reaped = backend.take_reaped();
    reaped.sort();
    let mut want = vec![a.id.clone(), b.id.clone()];
    want.sort();
    assert_eq!(
        reaped, want,
        "the manager is told which (worker_reaped events)"
    );
    assert!(backend.take_reaped().is_empty(), "once");
    let deletes = fake
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count();
    assert_eq!(deletes, 2);
    backend.get_worker_jobs().await.unwrap();
    assert_eq!(backend.reaped(), 2, "each is reaped once");
    let left: Vec<String> = fake.instances().into_iter().map(|i| i.name).collect();
    assert_eq!(left, [c.id.as_str()]);
    assert_all_valid(&fake.requests());
}

/// A dry run lists with a read-only backend: a stopped instance is not reaped (against the
/// discovery-validated fake).
#[tokio::test]
async fn a_read_only_backend_reaps_nothing() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    let backend = backend(&config(&fake)).read_only(true);
    let a = start(&backend, "aaaa").await.unwrap();
    fake.set_status(&a.id, "STOPPED");
    for _ in 0..3 {
        backend.get_worker_jobs().await.unwrap();
    }
    assert_eq!(backend.reaped(), 0);
    let deletes = fake
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count();
    assert_eq!(deletes, 0);
    assert_eq!(fake.instances().len(), 1);
}

#[tokio::test]
async fn preempted_spot_vms_are_reported_as_preempted() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    fake.set_operation_steps(3);
    let backend = backend(&config(&fake));
    let deleted = start(&backend, "aaaa").await.unwrap();
    let stopped = start(&backend, "bbbb").await.unwrap();
    let finished = start(&backend, "cccc").await.unwrap();
    let body = fake.instance(&deleted.id).unwrap().body;
    assert_eq!(body["scheduling"]["provisioningModel"], "SPOT");
    assert_eq!(body["scheduling"]["instanceTerminationAction"], "DELETE");
    fake.preempt(&deleted.id);
    fake.preempt_stopping(&stopped.id);
    fake.set_status(&finished.id, "TERMINATED");
    let jobs = backend.get_worker_jobs().await.unwrap();
    let state = |id: &str| jobs.iter().find(|j| j.id == id).map(|j| j.state);
    assert_eq!(state(&deleted.id), Some(JobState::Preempted), "{jobs:?}");
    assert_eq!(state(&stopped.id), Some(JobState::Preempted), "{jobs:?}");
    assert_eq!(
        state(&finished.id),
        Some(JobState::Ended),
        "powered off by its worker"
    );
    let preemption_lists = |f: &FakeCompute| {
        f.requests()
            .iter()
            .filter(|r| r.method_id.as_deref() == Some("compute.globalOperations.aggregatedList"))
            .count()
    };
    assert_eq!(preemption_lists(&fake), 1);
    backend.get_worker_jobs().await.unwrap();
    assert_eq!(preemption_lists(&fake), 1, "classified once");
    assert_all_valid(&fake.requests());
}

#[tokio::test]
async fn an_exhausted_zone_falls_back_to_the_next() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    let backend = backend(&config(&fake));
    fake.exhaust_zone(ZONE_A);
    let job = start(&backend, "aaaa").await.unwrap();
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(fake.instance(&job.id).unwrap().zone, ZONE_B);
    fake.exhaust_zone(ZONE_B);
    let error = start(&backend, "bbbb").await.unwrap_err();
    // A launch failure (the pool backs off), not a temporary error retried at every tick;
    // and no capacity, which counts toward the pool's `fallback`.
    assert!(!error.is_temporary(), "{error}");
    assert!(matches!(error, Error::NoCapacity { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("ZONE_RESOURCE_POOL_EXHAUSTED in every zone (us-central1-a, us-central1-b)"),
        "{text}"
    );
    assert_all_valid(&fake.requests());
}

#[tokio::test]
async fn down_deletes_every_own_instance_and_waits_for_the_operations() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    fake.set_operation_steps(4);
    let config = config(&fake);
    let backend = backend(&config);
    let live = start(&backend, "aaaa").await.unwrap();
    let ended = start(&backend, "bbbb").await.unwrap();
    fake.insert_instance(
        ZONE_A,
        "not-ours",
        &[("codalab-wm-manager", "other")],
        "RUNNING",
    );
    fake.set_status(&ended.id, "TERMINATED");

    let fresh = GceBackend::new(config.clone(), &credentials()).unwrap();
    let rows = down_pool("gce", &fresh, true, Duration::from_secs(5)).await;
    let listed: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.kind.as_str(), r.action.as_str()))
        .collect();
    assert!(
        rows.iter()
            .any(|r| r.name.contains(&live.id) && r.action.starts_with("would stop")),
        "{listed:?}"
    );
    assert!(rows.iter().any(|r| r.name == ended.id), "{listed:?}");
    assert_eq!(fake.instances().len(), 3, "a dry run deletes nothing");

    let fresh = GceBackend::new(config, &credentials()).unwrap();
    let rows = down_pool("gce", &fresh, false, Duration::from_secs(5)).await;
    assert!(rows.iter().all(|r| !r.failed), "{rows:?}");
    let names: Vec<String> = fake.instances().into_iter().map(|i| i.name).collect();
    assert_eq!(names, ["not-ours"]);
    assert_eq!(
        fake.pending_operations(),
        0,
        "down waited for every operation"
    );
    assert_all_valid(&fake.requests());
}

#[tokio::test]
async fn throttling_and_server_errors_are_temporary_and_pass() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    let backend = backend(&config(&fake));
    fake.push_fault(Fault::new(429, "rateLimitExceeded"));
    let error = backend.get_worker_jobs().await.unwrap_err();
    assert!(matches!(error, Error::RateLimited { .. }), "{error}");
    fake.push_fault(Fault::new(503, "backendError"));
    let error = backend.get_worker_jobs().await.unwrap_err();
    assert!(error.is_temporary() && !error.is_fatal(), "{error}");
    assert!(backend.get_worker_jobs().await.unwrap().is_empty());
}

/// Proves the fake's validation guards the equivalence: the backend's own insert body is
/// accepted, and the same body broken in one field is refused with a 400 naming it.
#[tokio::test]
async fn the_fake_rejects_the_backend_body_broken_once() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    let backend = backend(&config(&fake));
    let options = WorkerOptions::default();
    let request = LaunchRequest {
        unique: "abcd",
        worker: &options,
        dry_run: false,
    };
    let body = serde_json::to_value(backend.instance_for(&request, ZONE_A)).unwrap();
    let token: serde_json::Value = reqwest::Client::new()
        .get(format!(
            "{}/computeMetadata/v1/instance/service-accounts/default/token",
            fake.url()
        ))
        .header("Metadata-Flavor", "Google")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let send = |body: serde_json::Value| {
        let url = format!(
            "{}projects/{PROJECT}/zones/{ZONE_A}/instances",
            fake.api_url()
        );
        let token = token["access_token"].as_str().unwrap().to_owned();
        async move {
            let response = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let mut broken = body.clone();
    broken["disks"][0]["initializeParams"]["diskSizeGb"] = serde_json::json!(true);
    let (status, text) = send(broken).await;
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("disks[0].initializeParams.diskSizeGb"),
        "{text}"
    );
    let (status, text) = send(body).await;
    assert_eq!(status, 200, "{text}");
}

/// Calls per tick: one `aggregatedList` page per 500 own instances, the token fetched once
/// and cached, no other call while nothing ended.
#[tokio::test]
async fn one_tick_lists_every_page_and_nothing_else() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    let owned = [
        ("codalab-wm-manager", "codalab-wm"),
        ("codalab-wm-pool", "default"),
    ];
    for n in 0..1_200 {
        let zone = if n % 2 == 0 { ZONE_A } else { ZONE_B };
        fake.insert_instance(zone, &format!("cl-worker-{n:04}"), &owned, "RUNNING");
    }
    let backend = backend(&config(&fake));
    for round in 0..2 {
        fake.clear_requests();
        let jobs = backend.get_worker_jobs().await.unwrap();
        assert_eq!(jobs.len(), 1_200);
        let calls: Vec<String> = fake
            .requests()
            .iter()
            .map(|r| r.method_id.clone().unwrap_or_else(|| r.path.clone()))
            .collect();
        let lists = vec!["compute.instances.aggregatedList".to_owned(); 3];
        if round == 0 {
            let token = "/computeMetadata/v1/instance/service-accounts/default/token".to_owned();
            assert_eq!(calls, [vec![token], lists].concat());
        } else {
            assert_eq!(calls, lists, "the token is cached");
        }
    }
}

/// The password is in no request: not in the insert body (the instance reads it from Secret
/// Manager), not in what a dry run logs; a dry run sends nothing.
#[tokio::test]
async fn the_password_never_leaves_the_manager_and_a_dry_run_sends_nothing() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    let backend = backend(&config(&fake));
    let options = WorkerOptions::default();
    let request = LaunchRequest {
        unique: "abcd",
        worker: &options,
        dry_run: true,
    };
    let job = backend.start_worker_job(&request).await.unwrap();
    assert_eq!(
        (job.id.as_str(), job.state),
        ("dry-run-abcd", JobState::Ended)
    );
    assert!(fake.requests().is_empty(), "{:?}", fake.requests());
    start(&backend, "efgh").await.unwrap();
    let body = fake.instance("cl-worker-efgh").unwrap().body.to_string();
    assert!(!body.contains("alicepw"), "{body}");
    assert!(body.contains("projects/test-project/secrets/codalab-password/versions/latest"));
}

/// Neither the service account's key nor an access token shows in the backend's `Debug`.
#[tokio::test]
async fn debug_output_hides_the_key_and_the_token() {
    let fake = FakeCompute::start(PROJECT).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key.json");
    std::fs::write(&key_file, fake.test_key_file()).unwrap();
    let mut config = config(&fake);
    config.metadata_url = None;
    config.credentials_file = Some(key_file.display().to_string());
    let backend = backend(&config);
    backend.get_worker_jobs().await.unwrap();
    let shown = format!("{backend:?}");
    assert!(
        shown.contains("codalab-wm@test-project.iam.gserviceaccount.com"),
        "{shown}"
    );
    assert!(!shown.contains("ya29.fake"), "{shown}");
    let key_line = codalab_wm_fake_gce::TEST_KEY_PEM.lines().nth(3).unwrap();
    assert!(!shown.contains(key_line), "{shown}");
}
