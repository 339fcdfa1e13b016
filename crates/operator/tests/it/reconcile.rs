//! One reconcile at a time against the in-process fake Kubernetes API server
//! (`codalab-wm-fake-k8s`; there is no real API server on these machines), for what needs no
//! CodaLab server: the finalizer, the Degraded condition naming a bad spec or a missing
//! Secret, a follower doing nothing, and a deleted pool's pods deleted before the pool goes.
//! (Launches against the real CodaLab server are in `crates/cli/tests/it/operator.rs`.)

use codalab_wm_fake_k8s::FakeApiServer;
use codalab_wm_operator::crd::{CodaLabWorkerPool, FINALIZER, crd_json};
use codalab_wm_operator::reconcile::{Context, reconcile};
use codalab_wm_operator::spec::{legacy_manager_id, manager_id, pool_label};
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::runtime::events::{Recorder, Reporter};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const POOLS: &str = "codalab.org/codalabworkerpools";

async fn setup(leader: bool) -> (FakeApiServer, Api<CodaLabWorkerPool>, Arc<Context>) {
    let fake = FakeApiServer::start().await;
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let crds = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let crd: DynamicObject = serde_json::from_value(crd_json()).unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &crds)
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "test".into(),
            instance: None,
        },
    );
    let rx = codalab_wm_operator::lease::Leadership::fixed(leader);
    let context = Arc::new(Context::new(
        client.clone(),
        recorder,
        rx,
        Duration::from_secs(5),
    ));
    (fake, Api::namespaced(client, "team"), context)
}

async fn create(pools: &Api<CodaLabWorkerPool>, spec: serde_json::Value) -> Arc<CodaLabWorkerPool> {
    create_named(pools, "gpu", spec).await
}

async fn create_named(
    pools: &Api<CodaLabWorkerPool>,
    name: &str,
    spec: serde_json::Value,
) -> Arc<CodaLabWorkerPool> {
    let mut spec = spec;
    spec["server"] = json!("http://127.0.0.1:9");
    spec["credentialsSecret"] = json!("codalab-creds");
    let pool = CodaLabWorkerPool::new(name, serde_json::from_value(spec).unwrap());
    Arc::new(pools.create(&PostParams::default(), &pool).await.unwrap())
}

fn condition(fake: &FakeApiServer, kind: &str) -> (String, String, String) {
    let pool = fake.object(POOLS, "team", "gpu").unwrap();
    let conditions = pool["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let c = conditions
        .iter()
        .find(|c| c["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind}: {pool}"));
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    (text("status"), text("reason"), text("message"))
}

#[tokio::test]
async fn what_blocks_a_pool_is_named_in_its_degraded_condition() {
    let cases = [
        (
            json!({"min": 5, "max": 2}),
            "InvalidSpec",
            "max (2) is less than min (5)",
        ),
        (
            json!({"launchMode": "compat", "pendingTimeout": 60}),
            "InvalidSpec",
            "pending_timeout needs",
        ),
        (
            json!({"max": 2}),
            "CredentialsUnavailable",
            "credentials Secret `codalab-creds`",
        ),
    ];
    for (spec, reason, message) in cases {
        let (fake, pools, context) = setup(true).await;
        let pool = create(&pools, spec.clone()).await;
        reconcile(pool, context).await.unwrap();
        let (status, got_reason, got_message) = condition(&fake, "Degraded");
        assert_eq!(
            (status.as_str(), got_reason.as_str()),
            ("True", reason),
            "{spec}"
        );
        assert!(got_message.contains(message), "{spec}: {got_message}");
        assert_eq!(
            condition(&fake, "Ready").0,
            "False",
            "a degraded pool is not ready"
        );
        let stored = fake.object(POOLS, "team", "gpu").unwrap();
        assert_eq!(
            stored["metadata"]["finalizers"],
            json!([FINALIZER]),
            "{spec}"
        );
        assert_eq!(stored["status"]["observedGeneration"], 1);
        assert!(fake.pods("team").is_empty());
    }
}

#[tokio::test]
async fn a_follower_leaves_the_pool_alone() {
    let (fake, pools, context) = setup(false).await;
    let pool = create(&pools, json!({"max": 2})).await;
    reconcile(pool, context).await.unwrap();
    let stored = fake.object(POOLS, "team", "gpu").unwrap();
    assert!(stored["metadata"]["finalizers"].is_null(), "{stored}");
    assert!(stored["status"].is_null(), "{stored}");
}

#[tokio::test]
async fn a_deleted_pool_loses_its_pods_then_its_finalizer() {
    let (fake, pools, context) = setup(true).await;
    let pool = create(&pools, json!({"max": 2})).await;
    reconcile(pool, context.clone()).await.unwrap();
    let labels = [
        ("app", "cl-worker".to_owned()),
        ("app.kubernetes.io/managed-by", "codalab-wm".to_owned()),
        ("codalab-wm/manager-id", manager_id("gpu")),
    ];
    let stored = pools.get("gpu").await.unwrap();
    fake.insert_pod(
        "team",
        worker_pod("cl-worker-a", &labels, &stored, "Pending"),
    );
    fake.insert_pod(
        "team",
        worker_pod("cl-worker-b", &labels, &stored, "Pending"),
    );
    fake.add_pod("team", "someone-else", [("app", "other")], "Running");
    pools.delete("gpu", &DeleteParams::default()).await.unwrap();
    let deleting = Arc::new(pools.get("gpu").await.unwrap());
    assert!(deleting.metadata.deletion_timestamp.is_some());
    reconcile(deleting, context).await.unwrap();
    let left: Vec<String> = fake.pods("team").into_keys().collect();
    assert_eq!(left, ["someone-else"]);
    assert!(
        fake.object(POOLS, "team", "gpu").is_none(),
        "the finalizer is removed"
    );
    let events = fake.objects("events.k8s.io/events");
    assert!(
        events.iter().any(|e| e["reason"] == "WorkerReaped"),
        "{events:?}"
    );
}

/// A worker pod `name` with `labels`, controlled by `pool` (as the operator creates them).
fn worker_pod(name: &str, labels: &[(&str, String)], pool: &CodaLabWorkerPool, phase: &str) -> Pod {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let owner = pool
        .controller_owner_ref(&())
        .expect("a stored pool has a uid");
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "cl-worker", "image": "codalab/worker:fake"}]},
        "status": {"phase": phase},
    }))
    .unwrap()
}

/// The labels the operator gives pool `name`'s pods: today's, or an earlier release's
/// (`legacy`: the lossy id and pool label of review 2026-11-27 §1).
fn pool_labels(name: &str, legacy: bool) -> Vec<(&'static str, String)> {
    let (id, pool) = if legacy {
        (
            legacy_manager_id(name),
            codalab_wm_k8s::names::dns_label(name),
        )
    } else {
        (manager_id(name), pool_label(name))
    };
    vec![
        ("app", "cl-worker".to_owned()),
        ("app.kubernetes.io/managed-by", "codalab-wm".to_owned()),
        ("codalab-wm/manager-id", id),
        ("codalab.org/pool", pool),
    ]
}

/// Review 2026-11-27 §1: pools `gpu-a.b` and `gpu-a-b` once shared a manager id, and deleting
/// one deleted the other's running pods. Now the finalizer deletes only the pods its pool
/// controls: today's, and those an earlier release made for it (the old, shared id), never
/// the other pool's of either kind.
#[tokio::test]
async fn deleting_one_of_two_pools_with_similar_names_leaves_the_others_pods_alone() {
    let (fake, pools, context) = setup(true).await;
    for name in ["gpu-a.b", "gpu-a-b"] {
        let pool = create_named(&pools, name, json!({"max": 2})).await;
        reconcile(pool, context.clone()).await.unwrap();
        let pool = pools.get(name).await.unwrap();
        let pods = [
            (format!("cl-worker-{name}-now"), false),
            (format!("cl-worker-{name}-old"), true),
        ];
        for (pod, legacy) in pods {
            let pod = pod.replace('.', "-dot-");
            fake.insert_pod(
                "team",
                worker_pod(&pod, &pool_labels(name, legacy), &pool, "Running"),
            );
        }
    }
    pools
        .delete("gpu-a.b", &DeleteParams::default())
        .await
        .unwrap();
    let deleting = Arc::new(pools.get("gpu-a.b").await.unwrap());
    reconcile(deleting, context).await.unwrap();
    let left: Vec<String> = fake.pods("team").into_keys().collect();
    assert_eq!(left, ["cl-worker-gpu-a-b-now", "cl-worker-gpu-a-b-old"]);
    assert!(fake.object(POOLS, "team", "gpu-a.b").is_none());
    assert!(fake.object(POOLS, "team", "gpu-a-b").is_some());
}
