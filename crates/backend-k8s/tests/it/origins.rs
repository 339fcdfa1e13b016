//! Two deployments (another CodaLab server or user) under the same `manager_id` in one
//! namespace, with the real kube client against the in-repo fake API server (#28 item 4):
//! each pod carries its deployment's origin (`codalab-wm/origin`), and neither deployment
//! lists (counts toward max, stops, deletes as finished history or in `down`) the other's
//! pods. A pod without an origin (an older version's, or upstream's) is listed by both.

use codalab_wm_core::backend::{LaunchRequest, WorkerBackend, WorkerJob, new_unique};
use codalab_wm_core::command::WorkerOptions;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_fake_k8s::FakeApiServer;
use codalab_wm_k8s::{KubernetesBackend, KubernetesConfig};
use serde_json::json;

const NS: &str = "default";

fn worker(server: &str) -> WorkerOptions {
    WorkerOptions {
        server: server.into(),
        ..WorkerOptions::default()
    }
}

/// A backend with the default `manager_id` whose workers use `server`.
async fn backend(fake: &FakeApiServer, server: &str) -> KubernetesBackend {
    let value = json!({"cluster_host": fake.url(), "request_timeout_seconds": 5});
    let config: KubernetesConfig = serde_json::from_value(value).unwrap();
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("hunter2-password"),
    };
    KubernetesBackend::new(&config, &credentials, &worker(server))
        .await
        .unwrap()
}

async fn start(backend: &KubernetesBackend, server: &str) -> WorkerJob {
    backend
        .start_worker_job(&LaunchRequest {
            unique: &new_unique(),
            worker: &worker(server),
            dry_run: false,
        })
        .await
        .unwrap()
}

async fn listed(backend: &KubernetesBackend) -> Vec<String> {
    let jobs = backend.get_worker_jobs().await.unwrap();
    let mut names: Vec<String> = jobs.into_iter().map(|j| j.id).collect();
    names.sort();
    names
}

fn sorted(names: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    names.sort();
    names
}

#[tokio::test]
async fn another_deployments_pods_are_not_listed_and_pods_without_origin_are() {
    let fake = FakeApiServer::start().await;
    fake.auto_kubelet(true);
    let (prod_url, staging_url) = ("http://127.0.0.1:1", "http://127.0.0.1:2");
    let prod = backend(&fake, prod_url).await;
    let staging = backend(&fake, staging_url).await;
    let ours = start(&prod, prod_url).await;
    let theirs = start(&staging, staging_url).await;
    let origin = |name: &str| {
        let pod = fake.pods(NS).remove(name).unwrap();
        pod.metadata
            .labels
            .unwrap()
            .get("codalab-wm/origin")
            .cloned()
    };
    assert_eq!(origin(&ours.id).as_deref(), prod.template().origin());
    assert_ne!(origin(&ours.id), origin(&theirs.id));
    fake.add_pod(NS, "cl-worker-older", prod.template().labels(), "Running");

    assert_eq!(listed(&prod).await, sorted(&[&ours.id, "cl-worker-older"]));
    assert_eq!(
        listed(&staging).await,
        sorted(&[&theirs.id, "cl-worker-older"])
    );

    // `down` of one deployment: its pods and the one without origin go; the other's stays,
    // finished or not (its finished pods are its own history).
    fake.set_phase(NS, &theirs.id, "Failed");
    for job in prod.get_worker_jobs().await.unwrap() {
        prod.stop_worker_job(&job).await.unwrap();
    }
    prod.cleanup(false).await.unwrap();
    let left: Vec<String> = fake.pods(NS).into_keys().collect();
    assert_eq!(left, [theirs.id.as_str()]);

    // Without an origin (`down` that does not know the workers' user): every origin.
    let every = backend(&fake, prod_url).await.with_origin(None);
    assert_eq!(listed(&every).await, [theirs.id.as_str()]);
}

/// A backend for the deployment whose pods `uid` controls (an operator pool's).
fn controlled(fake: &FakeApiServer, uid: &str) -> KubernetesBackend {
    use codalab_wm_k8s::{PodOverrides, WorkerTemplate};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let value = json!({"cluster_host": fake.url(), "manager_id": "clwp-gpu-a-b", "request_timeout_seconds": 5});
    let config: KubernetesConfig = serde_json::from_value(value).unwrap();
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("hunter2-password"),
    };
    let owner = OwnerReference {
        api_version: "codalab.org/v1alpha1".into(),
        kind: "CodaLabWorkerPool".into(),
        name: format!("pool-{uid}"),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let overrides = PodOverrides {
        owner_references: vec![owner],
        ..PodOverrides::default()
    };
    let template = WorkerTemplate::new(&config, &credentials, &worker("http://127.0.0.1:1"))
        .unwrap()
        .with_overrides(overrides);
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    KubernetesBackend::from_template(client, template, &config)
}

/// Two operator pools whose pods carry one `manager_id` (pods an older operator made for
/// `gpu-a.b` and `gpu-a-b`, whose ids were the same: review 2026-11-27 §1): each pool's
/// backend lists only the pods its pool controls (owner reference by uid), never the other's,
/// nor a pod with the same labels and no controller.
#[tokio::test]
async fn a_pools_backend_lists_only_the_pods_its_pool_controls() {
    let fake = FakeApiServer::start().await;
    fake.auto_kubelet(true);
    let dotted = controlled(&fake, "uid-dotted");
    let dashed = controlled(&fake, "uid-dashed");
    let a = start(&dotted, "http://127.0.0.1:1").await;
    let b = start(&dashed, "http://127.0.0.1:1").await;
    fake.add_pod(
        NS,
        "cl-worker-nobodys",
        dotted.template().labels(),
        "Running",
    );
    assert_eq!(listed(&dotted).await, [a.id]);
    assert_eq!(listed(&dashed).await, [b.id]);
    assert_eq!(fake.pods(NS).len(), 3, "listing deletes nothing");
}
