//! The confused deputy (review §5.6): a pool may use only a credentials Secret that opted in
//! (label `codalab.org/worker-credentials=true`), only for the servers that Secret's
//! annotation and the operator's `--allowed-servers` allow. One reconcile at a time against
//! the in-process fake Kubernetes API server (`codalab-wm-fake-k8s`; there is no real API
//! server on these machines); no CodaLab server: an allowed pool goes on to log in at a
//! closed loopback port and stops there (CodaLabUnavailable), which is how the test sees that
//! it was allowed.

use codalab_wm_fake_k8s::FakeApiServer;
use codalab_wm_operator::access::AllowedServers;
use codalab_wm_operator::crd::{CodaLabWorkerPool, crd_json};
use codalab_wm_operator::lease::Leadership;
use codalab_wm_operator::reconcile::{Context, reconcile};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const SERVER: &str = "http://127.0.0.1:9";

async fn setup(
    allowed: &[&str],
    secret_metadata: Value,
) -> (FakeApiServer, Api<CodaLabWorkerPool>, Arc<Context>) {
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
    let mut metadata = secret_metadata;
    metadata["name"] = json!("codalab-creds");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": metadata,
        "stringData": {"codalab-username": "alice", "codalab-password": "hunter2"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), "team")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let reporter = Reporter {
        controller: "test".into(),
        instance: None,
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let leader = Leadership::fixed(true);
    let mut context = Context::new(client.clone(), recorder, leader, Duration::from_secs(5));
    let allowed: Vec<String> = allowed.iter().map(|s| (*s).to_owned()).collect();
    context.allowed_servers = AllowedServers::parse(&allowed).unwrap();
    (fake, Api::namespaced(client, "team"), Arc::new(context))
}

/// Reconciles a pool on [`SERVER`]; returns the Degraded condition's reason and message.
async fn degraded(
    fake: &FakeApiServer,
    pools: &Api<CodaLabWorkerPool>,
    context: Arc<Context>,
) -> (String, String) {
    let spec = json!({"server": SERVER, "credentialsSecret": "codalab-creds", "max": 2});
    let pool = CodaLabWorkerPool::new("gpu", serde_json::from_value(spec).unwrap());
    let pool = Arc::new(pools.create(&PostParams::default(), &pool).await.unwrap());
    reconcile(pool, context).await.unwrap();
    let stored = fake
        .object("codalab.org/codalabworkerpools", "team", "gpu")
        .unwrap();
    let conditions = stored["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let c = conditions
        .iter()
        .find(|c| c["type"] == "Degraded")
        .expect("a Degraded condition");
    assert_eq!(c["status"], "True", "{c}");
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    (text("reason"), text("message"))
}

fn warned(fake: &FakeApiServer, reason: &str) -> bool {
    let events = fake.objects("events.k8s.io/events");
    events
        .iter()
        .any(|e| e["reason"] == reason && e["type"] == "Warning")
}

fn secret_reads(fake: &FakeApiServer) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/namespaces/team/secrets/"))
        .count()
}

#[tokio::test]
async fn a_secret_that_did_not_opt_in_is_never_used() {
    let (fake, pools, context) = setup(&[], json!({"labels": {"app": "db"}})).await;
    let (reason, message) = degraded(&fake, &pools, context).await;
    assert_eq!(reason, "CredentialsNotAllowed");
    assert!(
        message.contains(
            "Secret `codalab-creds` is not labelled `codalab.org/worker-credentials=true`"
        ),
        "{message}"
    );
    assert!(warned(&fake, "CredentialsNotAllowed"));
}

#[tokio::test]
async fn a_secret_goes_only_to_the_servers_its_annotation_names() {
    let metadata = json!({
        "labels": {"codalab.org/worker-credentials": "true"},
        "annotations": {"codalab.org/allowed-servers": "https://worksheets.example.org"},
    });
    let (fake, pools, context) = setup(&[], metadata).await;
    let (reason, message) = degraded(&fake, &pools, context).await;
    assert_eq!(reason, "CredentialsNotAllowed");
    assert!(
        message.contains("may not be sent to `http://127.0.0.1:9`"),
        "{message}"
    );
}

#[tokio::test]
async fn a_server_outside_allowed_servers_is_refused_before_the_secret_is_read() {
    let metadata = json!({"labels": {"codalab.org/worker-credentials": "true"}});
    let (fake, pools, context) = setup(&["https://worksheets.example.org"], metadata).await;
    let (reason, message) = degraded(&fake, &pools, context).await;
    assert_eq!(reason, "ServerNotAllowed");
    assert!(
        message.contains("`http://127.0.0.1:9` is not one of the operator's --allowed-servers"),
        "{message}"
    );
    assert!(warned(&fake, "ServerNotAllowed"));
    assert_eq!(secret_reads(&fake), 0, "{:?}", fake.requests());
}

#[tokio::test]
async fn an_opted_in_secret_for_an_allowed_server_is_used() {
    let metadata = json!({
        "labels": {"codalab.org/worker-credentials": "true"},
        "annotations": {"codalab.org/allowed-servers": "http://127.0.0.1:9"},
    });
    let (fake, pools, context) = setup(&["http://127.0.0.1:9"], metadata).await;
    let (reason, _) = degraded(&fake, &pools, context).await;
    // Past every check: it tried to log in (nothing listens on port 9).
    assert_eq!(reason, "CodaLabUnavailable");
    assert_eq!(secret_reads(&fake), 1);
}
