//! Real `kubectl` (Debian's `kubernetes-client`, `/usr/bin/kubectl`) drives the in-process fake
//! Kubernetes API server (`codalab-wm-fake-k8s`): there is no real API server on these
//! machines. It installs the checked-in CRD, applies the sample pool, lists it with its printer
//! columns, raises `max` by applying an edited file, and deletes it. The fake has no OpenAPI
//! document, so kubectl runs with `--validate=false` (the files are validated offline by
//! `tests/deploy.rs`). Without kubectl the test skips, and fails under `CI=true`.

use codalab_wm_core::testing::require_service;
use codalab_wm_fake_k8s::FakeApiServer;
use std::path::{Path, PathBuf};

const POOLS: &str = "codalab.org/codalabworkerpools";

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/kubernetes/operator")
        .join(file)
}

/// kubectl against the fake, through a kubeconfig in `dir`.
struct Kubectl {
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn new(dir: &Path, url: &str) -> Self {
        let kubeconfig = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: codalab-wm\n\
             current-context: fake\nusers:\n- name: fake\n  user:\n    token: fake\n"
        );
        std::fs::write(&kubeconfig, text).unwrap();
        Self { kubeconfig }
    }

    /// Runs kubectl; returns its stdout, panicking with its output when it fails.
    async fn run(&self, args: &[&str]) -> String {
        let output = tokio::process::Command::new("/usr/bin/kubectl")
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.kubeconfig.parent().unwrap())
            .args(args)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "kubectl {args:?}:\n{stdout}{stderr}"
        );
        stdout
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_lists_resizes_and_deletes_a_pool() {
    if !require_service("kubectl", Path::new("/usr/bin/kubectl").exists()) {
        return;
    }
    let fake = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubectl = Kubectl::new(dir.path(), fake.url());
    let crd = deploy("crd.yaml");
    let out = kubectl
        .run(&["apply", "--validate=false", "-f", crd.to_str().unwrap()])
        .await;
    assert!(
        out.contains("codalabworkerpools.codalab.org created"),
        "{out}"
    );
    let sample = deploy("sample-pool.yaml");
    let out = kubectl
        .run(&["apply", "--validate=false", "-f", sample.to_str().unwrap()])
        .await;
    assert!(
        out.contains("codalabworkerpool.codalab.org/cpu created"),
        "{out}"
    );

    let out = kubectl.run(&["get", "codalabworkerpools"]).await;
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "MIN", "MAX", "DESIRED", "READY", "STAGED", "AGE"],
        "{out}"
    );
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..3], ["cpu", "1", "4"], "{out}");

    let edited = dir.path().join("pool.yaml");
    let text = std::fs::read_to_string(&sample).unwrap();
    std::fs::write(&edited, text.replace("max: 4", "max: 6")).unwrap();
    let out = kubectl
        .run(&["apply", "--validate=false", "-f", edited.to_str().unwrap()])
        .await;
    assert!(out.contains("configured"), "{out}");
    let pool = fake.object(POOLS, "codalab-wm", "cpu").unwrap();
    assert_eq!(pool["spec"]["max"], 6);
    assert_eq!(pool["metadata"]["generation"], 2);
    let out = kubectl
        .run(&["get", "clwp", "cpu", "-o", "jsonpath={.spec.max}"])
        .await;
    assert_eq!(out, "6");

    let out = kubectl
        .run(&["delete", "-f", edited.to_str().unwrap()])
        .await;
    assert!(out.contains("deleted"), "{out}");
    assert!(fake.object(POOLS, "codalab-wm", "cpu").is_none());
}
