//! What `cl-worker-manager down` does on Kubernetes, with the real kube client against the
//! in-repo fake API server: stop every own pod that is still a worker, then
//! [`WorkerBackend::cleanup`] deletes the own finished pods kept as history and the credentials
//! Secret the manager created. A Secret given by name (`credentials_secret`) is kept, another
//! manager's pods are not touched, and a dry run lists without changing anything.

use codalab_wm_core::backend::{LaunchRequest, WorkerBackend, WorkerJob, new_unique};
use codalab_wm_core::command::WorkerOptions;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_fake_k8s::FakeApiServer;
use codalab_wm_k8s::{KubernetesBackend, KubernetesConfig};
use k8s_openapi::api::core::v1::Secret as SecretObject;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::json;
use std::collections::BTreeMap;

const NS: &str = "default";

fn worker() -> WorkerOptions {
    WorkerOptions {
        server: "http://127.0.0.1:9".into(),
        ..WorkerOptions::default()
    }
}

async fn backend(
    fake: &FakeApiServer,
    manager_id: &str,
    extra: serde_json::Value,
) -> KubernetesBackend {
    let mut value =
        json!({"cluster_host": fake.url(), "manager_id": manager_id, "request_timeout_seconds": 5});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        value[k] = v;
    }
    let config: KubernetesConfig = serde_json::from_value(value).unwrap();
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("hunter2-password"),
    };
    KubernetesBackend::new(&config, &credentials, &worker())
        .await
        .unwrap()
}

async fn start(backend: &KubernetesBackend) -> WorkerJob {
    backend
        .start_worker_job(&LaunchRequest {
            unique: &new_unique(),
            worker: &worker(),
            dry_run: false,
        })
        .await
        .unwrap()
}

/// The names of the pods labelled with `manager_id`.
fn pods_of(fake: &FakeApiServer, manager_id: &str) -> Vec<String> {
    fake.pods(NS)
        .into_iter()
        .filter(|(_, pod)| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("codalab-wm/manager-id"))
                .is_some_and(|m| m == manager_id)
        })
        .map(|(name, _)| name)
        .collect()
}

/// `down` on one backend: stop every live own pod, then clean up.
async fn down(backend: &KubernetesBackend, dry_run: bool) -> Vec<codalab_wm_core::CleanupItem> {
    for job in backend.get_worker_jobs().await.unwrap() {
        if job.state.is_capacity() && !dry_run {
            backend.stop_worker_job(&job).await.unwrap();
        }
    }
    backend.cleanup(dry_run).await.unwrap()
}

#[tokio::test]
async fn down_deletes_own_pods_and_the_created_secret_and_keeps_a_given_one() {
    let fake = FakeApiServer::start().await;
    fake.auto_kubelet(true);
    let ours = backend(&fake, "test-manager", json!({})).await;
    let running = start(&ours).await;
    let finished = start(&ours).await;
    fake.set_phase(NS, &finished.id, "Failed");
    let created = "codalab-wm-test-manager-credentials";
    assert!(fake.secret(NS, created).is_some());

    // Another manager whose workers use a Secret given by name.
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let given = SecretObject {
        metadata: ObjectMeta {
            name: Some("given-credentials".into()),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([
            ("CODALAB_USERNAME".to_owned(), "bob".to_owned()),
            ("CODALAB_PASSWORD".to_owned(), "pw".to_owned()),
        ])),
        ..SecretObject::default()
    };
    Api::<SecretObject>::namespaced(client, NS)
        .create(&PostParams::default(), &given)
        .await
        .unwrap();
    let theirs = backend(
        &fake,
        "other-manager",
        json!({"credentials_secret": "given-credentials"}),
    )
    .await;
    let their_pod = start(&theirs).await;

    // Dry run: the finished pod and the created Secret are listed; nothing changes.
    let listed = down(&ours, true).await;
    let shown: Vec<(&str, &str, bool)> = listed
        .iter()
        .map(|i| (i.kind, i.name.as_str(), i.removed))
        .collect();
    assert_eq!(
        shown,
        [
            ("finished pod", finished.id.as_str(), false),
            ("secret", created, false)
        ]
    );
    assert_eq!(pods_of(&fake, "test-manager").len(), 2);
    assert!(fake.secret(NS, created).is_some());

    let removed = down(&ours, false).await;
    assert_eq!(removed.len(), 2, "{removed:?}");
    assert!(removed.iter().all(|i| i.removed && i.error.is_none()));
    assert!(
        ours.get_worker_jobs().await.unwrap().is_empty(),
        "no own pod left"
    );
    assert!(pods_of(&fake, "test-manager").is_empty());
    assert!(
        fake.secret(NS, created).is_none(),
        "the created secret is gone"
    );
    assert!(!fake.pods(NS).contains_key(&running.id));

    // The other manager's pod is still there; its down keeps the given Secret.
    assert_eq!(pods_of(&fake, "other-manager"), [their_pod.id]);
    let removed = down(&theirs, false).await;
    assert!(
        removed.is_empty(),
        "a given secret is not ours: {removed:?}"
    );
    assert!(pods_of(&fake, "other-manager").is_empty());
    assert!(fake.secret(NS, "given-credentials").is_some());
}
