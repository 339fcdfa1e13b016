//! What the operator remembers of check-ins when a status write fails (review 2026-11-27
//! §15), against the in-process fake Kubernetes API server and the in-process fake CodaLab
//! server: a pod whose worker checked in stays remembered as checked in (so it is never
//! judged lost) though the status that recorded it was never written and the next reconcile
//! starts from an object older than it.

use codalab_wm_fake_codalab::{FakeCodaLab, user_id};
use codalab_wm_fake_k8s::{FakeApiServer, Fault, Method};
use codalab_wm_operator::crd::{CodaLabWorkerPool, FINALIZER, crd_json};
use codalab_wm_operator::reconcile::{Context, reconcile};
use codalab_wm_operator::spec::{manager_id, pool_label};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Resource;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::events::{Recorder, Reporter};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const NS: &str = "team";
const POOLS: &str = "codalab.org/codalabworkerpools";

fn pod_name(n: u8) -> String {
    format!("cl-worker-{}", format!("{n:02x}").repeat(16))
}

fn worker(pod: &str) -> serde_json::Value {
    json!({"user_id": user_id("alice"), "worker_id": pod, "tag": null, "cpus": 1, "gpus": 0,
        "memory_bytes": 8589934592u64, "checkin_time": 1795295461, "run_uuids": ["0x1"],
        "is_terminating": false, "cpus_in_use": 1, "gpus_in_use": 0})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_in_whose_status_write_failed_is_still_remembered() {
    let codalab = FakeCodaLab::start().await.unwrap();
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
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "codalab-creds",
            "labels": {"codalab.org/worker-credentials": "true"}},
        "stringData": {"codalab-username": "alice", "codalab-password": "alicepw"}}))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // The finalizer is already there: the status write is the reconcile's only PATCH.
    let mut pool = CodaLabWorkerPool::new(
        "gpu",
        serde_json::from_value(
            json!({"server": codalab.url(), "credentialsSecret": "codalab-creds",
            "min": 0, "max": 2, "checkinTimeout": 60}),
        )
        .unwrap(),
    );
    pool.meta_mut().finalizers = Some(vec![FINALIZER.to_owned()]);
    let pools: Api<CodaLabWorkerPool> = Api::namespaced(client.clone(), NS);
    let stale = Arc::new(pools.create(&PostParams::default(), &pool).await.unwrap());
    let owner = stale.controller_owner_ref(&()).unwrap();
    for n in [1, 2] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": pod_name(n), "ownerReferences": [owner], "labels": {
                "app": "cl-worker", "app.kubernetes.io/managed-by": "codalab-wm",
                "codalab-wm/manager-id": manager_id("gpu"), "codalab.org/pool": pool_label("gpu")}},
            "spec": {"containers": [{"name": "cl-worker", "image": "codalab/worker:fake"}]},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        fake.insert_pod(NS, pod);
    }
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "test".into(),
            instance: None,
        },
    );
    let leader = codalab_wm_operator::lease::Leadership::fixed(true);
    let context = Arc::new(Context::new(
        client,
        recorder,
        leader,
        Duration::from_secs(5),
    ));

    // Both workers check in; the status that records it is refused.
    codalab.set_workers(vec![worker(&pod_name(1)), worker(&pod_name(2))]);
    fake.inject(Fault::Status(500), Some(Method::PATCH), 1);
    let failed = reconcile(stale.clone(), context.clone()).await;
    assert!(failed.is_err(), "the status write failed");
    assert!(fake.object(POOLS, NS, "gpu").unwrap()["status"].is_null());

    // The next reconcile starts from the object before it, and the server lists only one.
    codalab.set_workers(vec![worker(&pod_name(2))]);
    reconcile(stale, context).await.unwrap();
    let status = &fake.object(POOLS, NS, "gpu").unwrap()["status"];
    assert_eq!(
        status["checkedIn"],
        json!([pod_name(1), pod_name(2)]),
        "{status}"
    );
    assert_eq!(fake.pods(NS).len(), 2, "no pod deleted");
}
