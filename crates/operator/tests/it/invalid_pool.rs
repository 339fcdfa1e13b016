//! One pool that does not read must not blind the operator (review §5.3): the whole operator
//! (`controller::run`: Lease, pool watcher, reconciles) against the in-process fake Kubernetes
//! API server (`codalab-wm-fake-k8s`; there is no real API server on these machines). The fake
//! stores custom resources without schema validation, as a real API server stored pools with
//! `max: 5000000000` before the CRD had a maximum; the operator starts after both pools exist,
//! so its first list holds the bad one (what a restart does).

use clap::Parser;
use codalab_wm_fake_k8s::FakeApiServer;
use codalab_wm_operator::command::RunArgs;
use codalab_wm_operator::crd::{CodaLabWorkerPool, crd_json};
use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

fn pool(name: &str, max: u64) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "codalab.org/v1alpha1", "kind": "CodaLabWorkerPool",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"server": "http://127.0.0.1:9", "credentialsSecret": "missing", "max": max},
    }))
    .unwrap()
}

/// The Degraded condition's reason and message of each pool, once every pool has one.
fn degraded(pools: &BTreeMap<String, DynamicObject>) -> Option<BTreeMap<String, (String, String)>> {
    let mut found = BTreeMap::new();
    for (name, pool) in pools {
        let conditions = pool.data["status"]["conditions"].as_array()?;
        let c = conditions.iter().find(|c| c["type"] == "Degraded")?;
        let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
        found.insert(name.clone(), (text("reason"), text("message")));
    }
    Some(found)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_with_an_out_of_range_integer_is_reported_and_the_others_still_reconciled() {
    let fake = FakeApiServer::start().await;
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let crds = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let crd: DynamicObject = serde_json::from_value(crd_json()).unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &crds)
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let resource = ApiResource::erase::<CodaLabWorkerPool>(&());
    let pools: Api<DynamicObject> = Api::namespaced_with(client.clone(), "team", &resource);
    for (name, max) in [("good", 4), ("huge", 5_000_000_000)] {
        pools
            .create(&PostParams::default(), &pool(name, max))
            .await
            .unwrap();
    }
    // What kube's typed watcher (the controller's input before) makes of this list.
    let typed: Api<CodaLabWorkerPool> = Api::namespaced(client.clone(), "team");
    let mut typed = watcher::watcher(typed, watcher::Config::default()).boxed();
    let listed = loop {
        match typed.next().await.expect("the watcher goes on") {
            Ok(Event::Init) => continue,
            other => break other,
        }
    };
    assert!(
        matches!(listed, Err(watcher::Error::InitialListFailed(_))),
        "{listed:?}"
    );
    drop(typed);

    let cli = Cli::parse_from([
        "operator",
        "--cluster-host",
        fake.url(),
        "--health-listen",
        "127.0.0.1:0",
        "--lease-namespace",
        "codalab-wm",
        "--identity",
        "test",
        "--lease-seconds",
        "3",
        "--sync-seconds",
        "1",
    ]);
    let operator = tokio::spawn(codalab_wm_operator::controller::run(cli.run));
    // Follow the pools' changes (events, not sleeps) until both carry a Degraded condition.
    let mut seen = BTreeMap::new();
    let mut events = watcher::watcher(pools, watcher::Config::default()).boxed();
    let wait = async {
        loop {
            match events.next().await.expect("the watch goes on").unwrap() {
                Event::Apply(p) | Event::InitApply(p) => {
                    seen.insert(p.metadata.name.clone().unwrap(), p);
                }
                _ => {}
            }
            if let Some(found) = degraded(&seen).filter(|f| f.len() == 2) {
                return found;
            }
        }
    };
    let found = tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .expect("both pools reconciled within 120 s");
    operator.abort();
    let (reason, message) = &found["huge"];
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains("spec.max: invalid value: integer `5000000000`, expected u32"),
        "{message}"
    );
    // The good pool was reconciled: it got as far as its (missing) Secret.
    assert_eq!(found["good"].0, "CredentialsUnavailable", "{found:?}");
}
