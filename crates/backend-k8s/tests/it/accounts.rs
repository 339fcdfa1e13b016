//! The CodaLab account of the workers and of the deployment, checked at start (review 1.3,
//! 1.4): the real kube client against the in-repo fake API server (`codalab-wm-fake-k8s`).
//! A Secret given by name that holds another user than the manager's is refused, as is a
//! manager whose own credentials Secret already belongs to another deployment.

use codalab_wm_core::backend::{LaunchRequest, WorkerBackend, WorkerJob, new_unique};
use codalab_wm_core::command::WorkerOptions;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_fake_k8s::FakeApiServer;
use codalab_wm_k8s::{KubernetesBackend, KubernetesConfig};
use serde_json::json;

const NS: &str = "default";

fn credentials() -> Credentials {
    Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
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
    let request = LaunchRequest {
        unique: &unique,
        worker: &options,
        dry_run: false,
    };
    backend.start_worker_job(&request).await.unwrap()
}

async fn given_secret(fake: &FakeApiServer, name: &str, username: &str) {
    let mut secret = k8s_openapi::api::core::v1::Secret::default();
    secret.metadata.name = Some(name.into());
    secret.data = Some(
        [("codalab-username", username), ("codalab-password", "pw")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), k8s_openapi::ByteString(v.into())))
            .collect(),
    );
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(client, NS);
    secrets.create(&Default::default(), &secret).await.unwrap();
}

/// The manager (alice) refuses at start a Secret given by name whose workers log in as bob:
/// her worker list would never show them. As `codalab` (root) it sees every worker.
#[tokio::test]
async fn workers_of_another_account_are_refused_at_start() {
    use codalab_wm_core::backend::check_worker_account;
    let fake = FakeApiServer::start().await;
    let ours = backend(&fake, json!({})).await;
    check_worker_account(&ours, "alice").await.unwrap();
    let given = backend(&fake, json!({"credentials_secret": "team-creds"})).await;
    let missing = check_worker_account(&given, "alice").await.unwrap_err();
    assert!(
        missing.to_string().contains("`team-creds` does not exist"),
        "{missing}"
    );

    given_secret(&fake, "team-creds", "bob").await;
    let err = check_worker_account(&given, "alice").await.unwrap_err();
    assert!(err.is_fatal(), "{err}");
    assert!(
        err.to_string()
            .contains("the workers log in as CodaLab user `bob` but the manager as `alice`"),
        "{err}"
    );
    check_worker_account(&given, "codalab").await.unwrap();
    given_secret(&fake, "alice-creds", "alice").await;
    let same = backend(&fake, json!({"credentials_secret": "alice-creds"})).await;
    check_worker_account(&same, "alice").await.unwrap();
    assert!(fake.pods(NS).is_empty(), "nothing was launched");
}

/// Two deployments with the default `manager_id` in one namespace (review 1.4): the second,
/// another CodaLab user, is refused at start and at launch instead of replacing the first's
/// credentials Secret (whose workers would then log in as the second's user).
#[tokio::test]
async fn a_second_deployment_under_the_same_manager_id_is_refused() {
    use codalab_wm_core::backend::check_worker_account;
    let fake = FakeApiServer::start().await;
    let first = backend(&fake, json!({"manager_id": "default"})).await;
    check_worker_account(&first, "alice").await.unwrap();
    start(&first).await;
    let bob = Credentials {
        username: "bob".into(),
        password: Secret::new("bobpw"),
    };
    let config = config(&fake, json!({"manager_id": "default"}));
    let second = KubernetesBackend::new(&config, &bob, &worker())
        .await
        .unwrap();
    let err = check_worker_account(&second, "bob").await.unwrap_err();
    assert!(err.is_fatal(), "{err}");
    assert!(
        err.to_string().contains(
            "holds CodaLab user `alice`, not `bob`: another deployment uses this manager_id"
        ),
        "{err}"
    );
    let options = worker();
    let request = LaunchRequest {
        unique: &new_unique(),
        worker: &options,
        dry_run: false,
    };
    let err = second.start_worker_job(&request).await.unwrap_err();
    assert!(err.to_string().contains("another deployment"), "{err}");
    let data = fake
        .secret(NS, "codalab-wm-default-credentials")
        .unwrap()
        .data
        .unwrap();
    assert_eq!(
        data["codalab-username"].0, b"alice",
        "the first's Secret is kept"
    );
    assert_eq!(fake.pods(NS).len(), 1);
}
