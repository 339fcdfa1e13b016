//! Transport tests: the real kube client against the in-repo fake API server
//! (`codalab-wm-fake-k8s`) over HTTP.
//! The core conformance suite, ownership and adoption, the credentials Secret, stop with a uid
//! precondition, the finished-pod history limit, dry runs, and injected API errors.

use crate::support;

use codalab_wm_core::backend::{JobState, LaunchRequest, WorkerBackend, WorkerJob, new_unique};
use codalab_wm_core::command::WorkerOptions;
use codalab_wm_core::error::Error;
use codalab_wm_core::policy::{Observation, PolicyConfig, plan};
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::{Harness, Polling, run_conformance};
use codalab_wm_fake_k8s::{FakeApiServer, Fault, Method};
use codalab_wm_k8s::{KubernetesBackend, KubernetesConfig};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const NS: &str = "default";
const PASSWORD: &str = "hunter2-password";
const TOKEN: &str = "tok-never-logged";
/// A real self-signed CA certificate (its key was never kept), so rustls accepts it.
const TEST_CA: &str = include_str!("support/test-ca.pem");

fn credentials() -> Credentials {
    Credentials {
        username: "alice".into(),
        password: Secret::new(PASSWORD),
    }
}

fn worker() -> WorkerOptions {
    WorkerOptions {
        server: "http://127.0.0.1:9".into(),
        ..WorkerOptions::default()
    }
}

fn config(fake: &FakeApiServer, extra: serde_json::Value) -> KubernetesConfig {
    let mut value = json!({"cluster_host": fake.url(), "manager_id": "test-manager", "request_timeout_seconds": 5});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        value[k] = v;
    }
    serde_json::from_value(value).unwrap()
}

async fn backend(fake: &FakeApiServer, extra: serde_json::Value) -> KubernetesBackend {
    KubernetesBackend::new(&config(fake, extra), &credentials(), &worker())
        .await
        .unwrap()
}

async fn start(backend: &KubernetesBackend) -> WorkerJob {
    let unique = new_unique();
    let options = worker();
    backend
        .start_worker_job(&LaunchRequest {
            unique: &unique,
            worker: &options,
            dry_run: false,
        })
        .await
        .unwrap()
}

fn state_of(jobs: &[WorkerJob], id: &str) -> Option<JobState> {
    jobs.iter().find(|j| j.id == id).map(|j| j.state)
}

// ---- the conformance suite ----

struct FakeHarness {
    fake: FakeApiServer,
}

#[async_trait::async_trait]
impl Harness for FakeHarness {
    async fn backend(&self) -> Arc<dyn WorkerBackend> {
        Arc::new(backend(&self.fake, json!({})).await)
    }
    async fn hold_new_jobs(&self) -> bool {
        self.fake.hold(true);
        true
    }
    async fn release_jobs(&self) {
        self.fake.hold(false);
    }
    async fn finish_job(&self, job: &WorkerJob) {
        self.fake.set_phase(NS, &job.id, "Succeeded");
    }
    fn polling(&self) -> Polling {
        Polling {
            interval: Duration::from_millis(10),
            attempts: 50,
        }
    }
    fn worker_options(&self) -> WorkerOptions {
        worker()
    }
}

#[tokio::test]
async fn passes_the_conformance_suite() {
    let fake = FakeApiServer::start().await;
    fake.auto_kubelet(true);
    run_conformance(&FakeHarness { fake: fake.clone() })
        .await
        .unwrap();
    assert!(
        fake.requests().iter().all(|r| !r.contains("fieldSelector")),
        "listing is by labels only"
    );
}

// ---- listing ----

/// #42 item 4: a pod the scheduler cannot place is read with the scheduler's message, and
/// the cluster-autoscaler's `NotTriggerScaleUp` Event on it (written as the autoscaler writes
/// it, read back through core `v1` as the backend reads it, by the fake's one store) makes it
/// a pod no capacity will come for. The Events are listed only while a pod is unschedulable.
#[tokio::test]
async fn the_autoscalers_refusal_of_an_unschedulable_pod_is_its_reason() {
    use codalab_wm_core::PendingKind;
    use k8s_openapi::api::events::v1::Event;
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({})).await;
    let job = start(&backend).await;
    let before = fake.requests().len();
    backend.get_worker_jobs().await.unwrap();
    assert_eq!(
        fake.requests().len(),
        before + 1,
        "no pod unschedulable: one call"
    );

    let mut pod = fake.pods(NS)[&job.id].clone();
    pod.status = Some(
        serde_json::from_value(json!({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}))
        .unwrap(),
    );
    fake.insert_pod(NS, pod);
    let uid = fake.pods(NS)[&job.id].metadata.uid.clone().unwrap();
    let jobs = backend.get_worker_jobs().await.unwrap();
    assert_eq!(
        jobs[0].reason.as_deref(),
        Some("Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    );
    assert_eq!(backend.pending_kind(&jobs[0]), PendingKind::Queued);

    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let events: kube::Api<Event> = kube::Api::namespaced(client, NS);
    let now = k8s_openapi::jiff::Timestamp::now();
    let said = "pod didn't trigger scale-up: 1 max node group size reached";
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": format!("{}.187a", job.id), "namespace": NS},
        "eventTime": now.to_string(), "reportingController": "cluster-autoscaler",
        "reportingInstance": "cluster-autoscaler-1", "action": "ScaleUp", "type": "Normal",
        "reason": "NotTriggerScaleUp", "note": said,
        "regarding": {"kind": "Pod", "namespace": NS, "name": job.id, "uid": uid}
    }))
    .unwrap();
    events.create(&Default::default(), &event).await.unwrap();
    let before = fake.requests().len();
    let jobs = backend.get_worker_jobs().await.unwrap();
    let requests = fake.requests()[before..].to_vec();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(
        requests[1].starts_with("GET /api/v1/namespaces/default/events?")
            && requests[1].contains("fieldSelector=reason%3DNotTriggerScaleUp"),
        "{requests:?}"
    );
    assert_eq!(
        jobs[0].reason.as_deref(),
        Some(format!("NotTriggerScaleUp: {said}").as_str())
    );
    assert_eq!(backend.pending_kind(&jobs[0]), PendingKind::NoCapacity);
}

#[tokio::test]
async fn pending_pods_are_listed_as_pending_in_one_call() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({})).await;
    let first = start(&backend).await;
    let second = start(&backend).await;
    assert_eq!(
        (first.state, second.state),
        (JobState::Pending, JobState::Pending)
    );
    let before = fake.requests().len();
    let jobs = backend.get_worker_jobs().await.unwrap();
    let requests = fake.requests()[before..].to_vec();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(
        requests[0].starts_with("GET /api/v1/namespaces/default/pods?")
            && requests[0].contains("labelSelector=app%3Dcl-worker%2Capp.kubernetes.io%2Fmanaged-by%3Dcodalab-wm%2Ccodalab-wm%2Fmanager-id%3Dtest-manager"),
        "{requests:?}"
    );
    assert_eq!(jobs.len(), 2);
    assert!(
        jobs.iter()
            .all(|j| j.state == JobState::Pending && j.state.is_capacity()),
        "{jobs:?}"
    );
    assert!(
        jobs.iter()
            .all(|j| j.submitted_at.is_some() && j.shape == Some(backend.worker_shape()))
    );
}

#[tokio::test]
async fn pending_pods_hold_the_policy_at_max_workers() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({})).await;
    start(&backend).await;
    start(&backend).await;
    let jobs = backend.get_worker_jobs().await.unwrap();
    let count = |state| jobs.iter().filter(|j| j.state == state).count();
    let observed = Observation {
        staged: 5,
        pending: count(JobState::Pending),
        active: count(JobState::Active),
        since_last_launch: Some(Duration::from_secs(3600)),
    };
    let config = PolicyConfig {
        min_workers: 0,
        max_workers: 2,
        min_seconds_between_workers: 0,
    };
    let decision = plan(&observed, &config);
    assert_eq!(decision.launches, 0, "{}", decision.reason_codes());
}

#[tokio::test]
async fn every_phase_maps_and_terminating_pods_are_not_capacity() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({"keep_finished_pods": 100})).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(start(&backend).await.id);
    }
    fake.set_phase(NS, &ids[1], "Running");
    fake.set_phase(NS, &ids[2], "Succeeded");
    fake.set_phase(NS, &ids[3], "Failed");
    fake.set_phase(NS, &ids[4], "Running");
    let running = backend
        .get_worker_jobs()
        .await
        .unwrap()
        .into_iter()
        .find(|j| j.id == ids[4])
        .unwrap();
    backend.stop_worker_job(&running).await.unwrap();
    assert!(
        fake.pods(NS)[&ids[4]].metadata.deletion_timestamp.is_some(),
        "graceful deletion"
    );

    let jobs = backend.get_worker_jobs().await.unwrap();
    let states: Vec<_> = ids.iter().map(|id| state_of(&jobs, id)).collect();
    assert_eq!(
        states,
        [
            Some(JobState::Pending),
            Some(JobState::Active),
            Some(JobState::Ended),
            Some(JobState::Failed),
            Some(JobState::Ended)
        ]
    );
    assert_eq!(
        jobs.iter()
            .find(|j| j.id == ids[4])
            .unwrap()
            .reason
            .as_deref(),
        Some("Terminating")
    );
    assert_eq!(jobs.iter().filter(|j| j.state.is_capacity()).count(), 2);
}

#[tokio::test]
async fn only_this_managers_pods_are_seen_and_adopted_after_a_restart() {
    let fake = FakeApiServer::start().await;
    let foreign = |name: &str, labels: serde_json::Value| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}}))
        .unwrap()
    };
    fake.insert_pod(NS, foreign("other-manager", json!({"app": "cl-worker", "app.kubernetes.io/managed-by": "codalab-wm", "codalab-wm/manager-id": "other"})));
    fake.insert_pod(
        NS,
        foreign("cl-worker-upstream", json!({"app": "cl-worker"})),
    );
    fake.insert_pod(NS, foreign("unrelated", json!({})));
    fake.insert_pod("elsewhere", foreign("same-labels-other-namespace", json!({"app": "cl-worker", "app.kubernetes.io/managed-by": "codalab-wm", "codalab-wm/manager-id": "test-manager"})));

    let job = start(&backend(&fake, json!({})).await).await;
    let restarted = backend(&fake, json!({})).await;
    let jobs = restarted.get_worker_jobs().await.unwrap();
    assert_eq!(
        jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        [job.id.as_str()]
    );
    let other = backend(&fake, json!({"manager_id": "other"}))
        .await
        .get_worker_jobs()
        .await
        .unwrap();
    assert_eq!(
        other.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["other-manager"]
    );
}

// ---- starting ----

#[tokio::test]
async fn start_creates_the_secret_then_the_pod() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({})).await;
    let job = start(&backend).await;
    let secret = fake
        .secret(NS, "codalab-wm-test-manager-credentials")
        .expect("secret created");
    let data = secret.data.unwrap();
    assert_eq!(data["codalab-password"].0, PASSWORD.as_bytes());
    assert_eq!(
        secret.metadata.labels.unwrap()["codalab-wm/manager-id"],
        "test-manager"
    );
    let pod = &fake.pods(NS)[&job.id];
    assert!(!serde_json::to_string(pod).unwrap().contains(PASSWORD));
    assert_eq!(job.id, pod.metadata.name.clone().unwrap());
    // Once per process: a second start does not touch the Secret again.
    let before = fake.requests().len();
    start(&backend).await;
    let requests = fake.requests()[before..].to_vec();
    assert_eq!(
        requests,
        ["POST /api/v1/namespaces/default/pods?"],
        "{requests:?}"
    );
}

#[tokio::test]
async fn an_existing_secret_is_updated_with_the_current_credentials() {
    let fake = FakeApiServer::start().await;
    start(&backend(&fake, json!({})).await).await;
    let rotated = Credentials {
        username: "alice".into(),
        password: Secret::new("rotated-password"),
    };
    let restarted = KubernetesBackend::new(&config(&fake, json!({})), &rotated, &worker())
        .await
        .unwrap();
    start(&restarted).await;
    let data = fake
        .secret(NS, "codalab-wm-test-manager-credentials")
        .unwrap()
        .data
        .unwrap();
    assert_eq!(data["codalab-password"].0, b"rotated-password");
}

#[tokio::test]
async fn a_given_secret_must_exist_and_is_not_created() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({"credentials_secret": "team-creds"})).await;
    let options = worker();
    let request = LaunchRequest {
        unique: &new_unique(),
        worker: &options,
        dry_run: false,
    };
    let err = backend.start_worker_job(&request).await.unwrap_err();
    assert!(err.is_fatal(), "{err}");
    assert!(
        err.to_string()
            .contains("credentials_secret `team-creds` does not exist in namespace `default`"),
        "{err}"
    );
    assert!(fake.pods(NS).is_empty());

    let mut secret = k8s_openapi::api::core::v1::Secret::default();
    secret.metadata.name = Some("team-creds".into());
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(client, NS);
    secrets.create(&Default::default(), &secret).await.unwrap();
    let job = start(&backend).await;
    assert!(
        fake.secret(NS, "codalab-wm-test-manager-credentials")
            .is_none()
    );
    let pod = serde_json::to_value(&fake.pods(NS)[&job.id]).unwrap();
    assert_eq!(
        pod["spec"]["containers"][0]["env"][1]["valueFrom"]["secretKeyRef"]["name"],
        "team-creds"
    );
}

#[tokio::test]
async fn create_is_idempotent() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({})).await;
    let unique = new_unique();
    let options = worker();
    let request = LaunchRequest {
        unique: &unique,
        worker: &options,
        dry_run: false,
    };
    let first = backend.start_worker_job(&request).await.unwrap();
    let again = backend.start_worker_job(&request).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(fake.pods(NS).len(), 1);
}

#[tokio::test]
async fn every_manifest_kind_is_accepted_by_the_fake() {
    let fake = FakeApiServer::start().await;
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let mut secret = k8s_openapi::api::core::v1::Secret::default();
    secret.metadata.name = Some("team-worker-credentials".into());
    kube::Api::namespaced(client.clone(), NS)
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    for (name, config) in support::combos::all() {
        let backend =
            KubernetesBackend::with_client(client.clone(), &config, &credentials(), &worker())
                .unwrap();
        let job = start(&backend).await;
        assert_eq!(job.state, JobState::Pending, "{name}");
    }
    assert_eq!(fake.pods(NS).len(), 24);
}

#[tokio::test]
async fn dry_run_creates_nothing_and_logs_no_secret() {
    let fake = FakeApiServer::start().await;
    // The CA cert as an environment variable would carry it: one line with literal `\n`s.
    let cert = TEST_CA.trim().replace('\n', r"\n");
    let backend = backend(
        &fake,
        json!({"bundle_runtime": "kubernetes", "auth_token": TOKEN, "cert": cert}),
    )
    .await;
    let logs = support_logs::Capture::default();
    let _guard = tracing::subscriber::set_default(logs.subscriber());
    let unique = new_unique();
    let options = worker();
    let job = backend
        .start_worker_job(&LaunchRequest {
            unique: &unique,
            worker: &options,
            dry_run: true,
        })
        .await
        .unwrap();
    assert_eq!(job.id, format!("dry-run-{unique}"));
    assert_eq!(job.state, JobState::Ended);
    assert!(fake.requests().is_empty(), "{:?}", fake.requests());
    let text = logs.text();
    assert!(
        text.contains("dry run: would create this worker pod"),
        "{text}"
    );
    assert!(text.contains(&format!("cl-worker-{unique}")), "{text}");
    assert!(text.contains("$(CODALAB_KUBERNETES_AUTH_TOKEN)"), "{text}");
    let cert_body = TEST_CA.lines().nth(1).unwrap();
    for secret in [PASSWORD, TOKEN, cert_body] {
        assert!(!text.contains(secret), "{secret} in the log:\n{text}");
    }
    assert!(!format!("{backend:?}").contains(TOKEN));
}

mod support_logs {
    //! A tracing subscriber writing into a buffer.
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    pub struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Capture {
        pub fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
            let writer = self.clone();
            tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_max_level(tracing::Level::TRACE)
                .finish()
        }
        pub fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }
}

// ---- stopping and cleaning up ----

#[tokio::test]
async fn stop_deletes_with_a_uid_precondition() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({})).await;
    let job = start(&backend).await;
    let listed = backend.get_worker_jobs().await.unwrap();
    assert_eq!(state_of(&listed, &job.id), Some(JobState::Pending));
    // The pod is replaced by another one of the same name: stopping the old job must not
    // delete the new pod.
    let old = fake.pods(NS)[&job.id].clone();
    fake.remove_pod(NS, &job.id);
    let mut replacement = old.clone();
    replacement.metadata.uid = None;
    fake.insert_pod(NS, replacement);
    backend.stop_worker_job(&job).await.unwrap();
    assert!(
        fake.pods(NS).contains_key(&job.id),
        "the replacement pod was deleted"
    );

    // A fresh backend (no cached uid) reads the uid and deletes; an unscheduled pod goes at once.
    let restarted = backend_again(&fake).await;
    restarted.stop_worker_job(&job).await.unwrap();
    assert!(!fake.pods(NS).contains_key(&job.id));
    // Stopping what is gone is fine.
    restarted.stop_worker_job(&job).await.unwrap();
}

async fn backend_again(fake: &FakeApiServer) -> KubernetesBackend {
    backend(fake, json!({})).await
}

#[tokio::test]
async fn finished_pods_beyond_the_limit_are_deleted_oldest_first() {
    let fake = FakeApiServer::start().await;
    let finished = |name: &str, phase: &str, created: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created, "labels": {"app": "cl-worker",
                "app.kubernetes.io/managed-by": "codalab-wm", "codalab-wm/manager-id": "test-manager"}},
            "spec": {"containers": [{"name": "cl-worker", "image": "i"}], "nodeName": "n1"},
            "status": {"phase": phase}
        }))
        .unwrap()
    };
    fake.insert_pod(
        NS,
        finished("cl-worker-a", "Succeeded", "2026-11-21T08:00:00Z"),
    );
    fake.insert_pod(
        NS,
        finished("cl-worker-b", "Failed", "2026-11-21T09:00:00Z"),
    );
    fake.insert_pod(
        NS,
        finished("cl-worker-c", "Succeeded", "2026-11-21T10:00:00Z"),
    );
    fake.insert_pod(
        NS,
        finished("cl-worker-d", "Succeeded", "2026-11-21T11:00:00Z"),
    );
    fake.insert_pod(
        NS,
        finished("cl-worker-running", "Running", "2026-11-21T07:00:00Z"),
    );
    let backend = backend(&fake, json!({"keep_finished_pods": 2})).await;
    let jobs = backend.get_worker_jobs().await.unwrap();
    let mut left: Vec<_> = fake.pods(NS).into_keys().collect();
    left.sort();
    assert_eq!(left, ["cl-worker-c", "cl-worker-d", "cl-worker-running"]);
    let mut listed: Vec<_> = jobs.iter().map(|j| j.id.clone()).collect();
    listed.sort();
    assert_eq!(listed, left);
    let deletes: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("DELETE"))
        .collect();
    assert_eq!(
        deletes,
        [
            "DELETE /api/v1/namespaces/default/pods/cl-worker-a?",
            "DELETE /api/v1/namespaces/default/pods/cl-worker-b?"
        ]
    );
}

/// A dry run (`down --dry-run`, `status --dry-tick`, `--dry-run`) lists with a read-only
/// backend: the finished pods past the limit are listed, none is deleted (review: a dry
/// run deleted them). Against the in-repo fake API server.
#[tokio::test]
async fn a_read_only_backend_deletes_no_finished_pod() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({"keep_finished_pods": 0}))
        .await
        .read_only(true);
    let job = start(&backend).await;
    fake.set_phase(NS, &job.id, "Succeeded");
    let jobs = backend.get_worker_jobs().await.unwrap();
    assert_eq!(state_of(&jobs, &job.id), Some(JobState::Ended));
    assert!(
        fake.pods(NS).contains_key(&job.id),
        "the finished pod is kept"
    );
    let deletes = fake
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("DELETE"))
        .count();
    assert_eq!(deletes, 0);
}

#[tokio::test]
async fn a_failing_cleanup_does_not_fail_the_listing() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({"keep_finished_pods": 0})).await;
    let job = start(&backend).await;
    fake.set_phase(NS, &job.id, "Succeeded");
    fake.inject(Fault::Status(500), Some(Method::DELETE), 1);
    let jobs = backend.get_worker_jobs().await.unwrap();
    assert_eq!(state_of(&jobs, &job.id), Some(JobState::Ended));
    backend.get_worker_jobs().await.unwrap();
    assert!(fake.pods(NS).is_empty(), "deleted on the next tick");
}

// ---- errors ----

#[tokio::test]
async fn api_errors_are_errors_never_zero_workers() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({})).await;
    start(&backend).await;
    let cases: [(Fault, bool, &str); 6] = [
        (
            Fault::Status(500),
            true,
            "InternalError: Internal error occurred",
        ),
        (Fault::Status(503), true, "ServiceUnavailable"),
        (Fault::Status(504), true, "Timeout"),
        (
            Fault::Throttle {
                retry_after_seconds: 7,
            },
            true,
            "throttling",
        ),
        (
            Fault::Status(403),
            false,
            "Forbidden: pods is forbidden: User \"system:serviceaccount:codalab:wm\"",
        ),
        (Fault::Garbage, true, "invalid reply"),
    ];
    for (fault, temporary, message) in cases {
        fake.inject(fault.clone(), None, 1);
        let before = fake.requests().len();
        let err = backend
            .get_worker_jobs()
            .await
            .expect_err("an API error must not read as a list");
        assert_eq!(err.is_temporary(), temporary, "{fault:?}: {err}");
        assert!(err.to_string().contains(message), "{fault:?}: {err}");
        assert_eq!(
            fake.requests().len() - before,
            1,
            "{fault:?}: kube must not retry on its own"
        );
        assert_eq!(
            backend.get_worker_jobs().await.unwrap().len(),
            1,
            "recovers after {fault:?}"
        );
    }
    fake.inject(
        Fault::Throttle {
            retry_after_seconds: 7,
        },
        None,
        1,
    );
    let err = backend.get_worker_jobs().await.unwrap_err();
    assert!(matches!(err, Error::RateLimited { .. }), "{err:?}");
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
}

#[tokio::test]
async fn start_and_stop_errors_are_classified() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({})).await;
    let job = start(&backend).await;
    fake.inject(Fault::Status(500), Some(Method::POST), 1);
    let options = worker();
    let request = LaunchRequest {
        unique: &new_unique(),
        worker: &options,
        dry_run: false,
    };
    let err = backend.start_worker_job(&request).await.unwrap_err();
    assert!(
        err.is_temporary() && err.to_string().contains("create a worker pod"),
        "{err}"
    );
    fake.inject(Fault::Status(403), Some(Method::DELETE), 1);
    let err = backend.stop_worker_job(&job).await.unwrap_err();
    assert!(
        !err.is_temporary() && err.to_string().contains("delete a worker pod: Forbidden"),
        "{err}"
    );
    fake.inject(
        Fault::Throttle {
            retry_after_seconds: 2,
        },
        Some(Method::POST),
        1,
    );
    let err = backend.start_worker_job(&request).await.unwrap_err();
    assert!(matches!(err, Error::RateLimited { .. }), "{err:?}");
}

#[tokio::test]
async fn a_slow_api_server_times_out_as_a_temporary_error() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({"request_timeout_seconds": 1})).await;
    fake.set_delay(Some(Duration::from_secs(3)));
    let started = std::time::Instant::now();
    let err = backend.get_worker_jobs().await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    assert!(err.is_temporary(), "{err}");
    assert!(err.to_string().contains("api server unreachable"), "{err}");
}

#[tokio::test]
async fn an_unreachable_api_server_is_a_temporary_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let config: KubernetesConfig = serde_json::from_value(json!({"cluster_host": url})).unwrap();
    let backend = KubernetesBackend::new(&config, &credentials(), &worker())
        .await
        .unwrap();
    let err = backend.get_worker_jobs().await.unwrap_err();
    assert!(err.is_temporary(), "{err}");
}

// ---- the fake itself: the rules the backend's pods are checked against ----

#[tokio::test]
async fn the_fake_refuses_invalid_pods_like_the_api_server() {
    let fake = FakeApiServer::start().await;
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, NS);
    let pod = |spec: serde_json::Value, labels: serde_json::Value| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "labels": labels}, "spec": spec}))
            .unwrap()
    };
    let container = |resources: serde_json::Value| json!({"containers": [{"name": "c", "image": "i", "resources": resources}]});
    let cases = [
        (
            pod(
                container(json!({"requests": {"nvidia.com/gpu": "1"}})),
                json!({}),
            ),
            "Limit must be set for non overcommitable resources",
        ),
        (
            pod(
                container(
                    json!({"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}),
                ),
                json!({}),
            ),
            "must be equal to nvidia.com/gpu limit of 2",
        ),
        (
            pod(
                container(json!({"limits": {"nvidia.com/gpu": "0.5"}})),
                json!({}),
            ),
            "must be an integer",
        ),
        (
            pod(
                container(json!({"limits": {"cpu": "1"}, "requests": {"cpu": "2"}})),
                json!({}),
            ),
            "must be less than or equal to cpu limit of 1",
        ),
        (
            pod(
                container(json!({})),
                json!({"codalab-wm/manager-id": "a/b"}),
            ),
            "metadata.labels: Invalid value: \"a/b\"",
        ),
        (
            pod(json!({"containers": [{"name": "c"}]}), json!({})),
            "spec.containers[0].image: Required value",
        ),
        (
            pod(
                json!({"containers": [{"name": "c", "image": "i", "volumeMounts": [{"name": "w", "mountPath": "/w"}]}]}),
                json!({}),
            ),
            "volumeMounts[0].name: Not found",
        ),
    ];
    for (pod, expected) in cases {
        match pods.create(&Default::default(), &pod).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(
                    (status.code, status.reason.as_str()),
                    (422, "Invalid"),
                    "{expected}"
                );
                assert!(
                    status.message.contains(expected),
                    "{expected}: {}",
                    status.message
                );
            }
            other => panic!("{expected}: {other:?}"),
        }
    }
    let lp = kube::api::ListParams::default().fields("spec.containers.image=x");
    let err = pods.list(&lp).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("field label not supported: spec.containers.image"),
        "{err}"
    );
}

#[tokio::test]
async fn the_fake_selects_by_field() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({})).await;
    let running = start(&backend).await;
    start(&backend).await;
    fake.set_phase(NS, &running.id, "Running");
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, NS);
    let lp = kube::api::ListParams::default()
        .labels("app in (cl-worker),!missing")
        .fields("status.phase=Running");
    let names: Vec<_> = pods
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(names, [running.id]);
}

// ---- the fake as a library (the bench harness's use) ----

#[tokio::test]
async fn added_pods_are_listed_with_one_counted_request_per_tick() {
    let fake = FakeApiServer::start().await;
    let backend = backend(&fake, json!({})).await;
    let own = backend.template().labels();
    for i in 0..1000 {
        let phase = if i % 2 == 0 { "Running" } else { "Pending" };
        fake.add_pod(NS, &format!("cl-worker-{i:04}"), own.clone(), phase);
    }
    fake.add_pod(NS, "someone-else", [("app", "cl-worker")], "Running");
    assert_eq!(fake.request_count(), 0, "hooks are not requests");
    for _ in 0..20 {
        let jobs = backend.get_worker_jobs().await.unwrap();
        assert_eq!(jobs.len(), 1000);
        assert_eq!(
            jobs.iter().filter(|j| j.state == JobState::Active).count(),
            500
        );
    }
    assert_eq!(fake.request_count(), 20, "{:?}", fake.requests());
    assert_eq!(fake.requests().len(), fake.request_count());
}

#[tokio::test]
async fn the_fake_serves_plain_http_without_auth_and_a_bare_field_selector() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fake = FakeApiServer::start().await;
    fake.add_pod(NS, "cl-worker-run", [("app", "cl-worker")], "Running");
    fake.add_pod(NS, "cl-worker-wait", [("app", "cl-worker")], "Pending");
    fake.add_pod(NS, "other", Vec::<(String, String)>::new(), "Running");
    let path = "/api/v1/namespaces/default/pods?fieldSelector=status.phase%3D%3DRunning";
    let host = fake.url().trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let list: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(list["kind"], "PodList");
    let mut names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["cl-worker-run", "other"]);
    assert_eq!(fake.requests(), [format!("GET {path}")], "recorded as sent");
}

/// The fake's own pods ([`FakeApiServer::add_pod`]) carry the backend's worker container, so the
/// backend reads them as it reads its own (the fake cannot import the name: it does not depend
/// on this crate).
#[test]
fn the_fake_names_the_worker_container_as_the_backend_does() {
    assert_eq!(
        codalab_wm_fake_k8s::WORKER_CONTAINER,
        codalab_wm_k8s::manifest::CONTAINER_NAME
    );
}
