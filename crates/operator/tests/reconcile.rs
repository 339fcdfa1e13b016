//! One reconcile at a time against the in-process fake Kubernetes API server
//! (`codalab-wm-fake-k8s`; there is no real API server on these machines), for what needs no
//! CodaLab server: the finalizer, the Degraded condition naming a bad spec or a missing
//! Secret, a follower doing nothing, and a deleted pool's pods deleted before the pool goes.
//! (Launches against the real CodaLab server are in `crates/cli/tests/operator.rs`.)

use codalab_wm_fake_k8s::FakeApiServer;
use codalab_wm_operator::crd::{CodaLabWorkerPool, FINALIZER, crd_json};
use codalab_wm_operator::reconcile::{Context, reconcile};
use codalab_wm_operator::spec::manager_id;
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
    let mut spec = spec;
    spec["server"] = json!("http://127.0.0.1:9");
    spec["credentialsSecret"] = json!("codalab-creds");
    let pool = CodaLabWorkerPool::new("gpu", serde_json::from_value(spec).unwrap());
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
    fake.add_pod("team", "cl-worker-a", labels.clone(), "Pending");
    fake.add_pod("team", "cl-worker-b", labels, "Pending");
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
