//! Every manifest the backend can produce validates against the official Kubernetes schemas
//! (PyPI `kubernetes-validate`, strict mode: unknown fields are errors), and a deliberately
//! broken one does not, which proves the check can fail.
//!
//! Needs the `k8s-validate` service (`cargo xtask services up k8s-validate`: a venv under
//! `$SERVICES_DIR/k8s-validate`); skips without it, fails without it under `CI=true`.

use crate::support::combos;

use codalab_wm_core::command::WorkerOptions;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::require_service;
use codalab_wm_k8s::{PodOverrides, WorkerTemplate};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Kubernetes version the manifests target (k8s-openapi's `v1_37`).
const KUBERNETES_VERSION: &str = "1.37.0";

fn validator() -> PathBuf {
    let services = codalab_wm_core::testing::services_dir();
    services.join("k8s-validate/venv/bin/kubernetes-validate")
}

/// Runs the validator in strict mode on `files`; returns (success, output).
fn validate(files: &[PathBuf]) -> (bool, String) {
    let output = Command::new(validator())
        .args(["--strict", "-k", KUBERNETES_VERSION])
        .args(files)
        .output()
        .expect("running kubernetes-validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// Writes every manifest the backend can produce; returns the files.
fn write_manifests(dir: &Path) -> Vec<PathBuf> {
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("hunter2"),
    };
    let worker = WorkerOptions {
        server: "https://worksheets.example".into(),
        tag: Some("gpu".into()),
        work_dir_prefix: Some("/scratch".into()),
        ..WorkerOptions::default()
    };
    let mut files = Vec::new();
    for (name, config) in combos::all() {
        let template = WorkerTemplate::new(&config, &credentials, &worker).expect(&name);
        let pod = dir.join(format!("pod-{name}.json"));
        std::fs::write(
            &pod,
            serde_json::to_vec_pretty(&template.pod(&"ab".repeat(16))).unwrap(),
        )
        .unwrap();
        files.push(pod);
        if let Some(secret) = template.secret() {
            let path = dir.join(format!("secret-{name}.json"));
            std::fs::write(&path, serde_json::to_vec_pretty(&secret).unwrap()).unwrap();
            files.push(path);
        }
    }
    files.push(overridden_pod(dir, &credentials, &worker));
    files
}

/// A pod with every override the operator adds (its pool's pod template and ownership).
fn overridden_pod(dir: &Path, credentials: &Credentials, worker: &WorkerOptions) -> PathBuf {
    let (_, config) = combos::all().remove(0);
    let overrides: PodOverrides = PodOverrides {
        node_selector: [("kubernetes.io/os".to_owned(), "linux".to_owned())].into(),
        tolerations: vec![
            serde_json::from_value(serde_json::json!({
                "key": "codalab.org/workers", "operator": "Exists", "effect": "NoSchedule"}))
            .unwrap(),
        ],
        priority_class_name: Some("batch".into()),
        owner_references: vec![
            serde_json::from_value(serde_json::json!({
                "apiVersion": "codalab.org/v1alpha1", "kind": "CodaLabWorkerPool", "name": "cpu",
                "uid": "6f1c2d3e-0000-4000-8000-000000000001", "controller": true}))
            .unwrap(),
        ],
        labels: [("codalab.org/pool".to_owned(), "cpu".to_owned())].into(),
    };
    let template = WorkerTemplate::new(&config, credentials, worker)
        .unwrap()
        .with_overrides(overrides);
    let path = dir.join("pod-overridden.json");
    let pod = template.pod(&"ef".repeat(16));
    std::fs::write(&path, serde_json::to_vec_pretty(&pod).unwrap()).unwrap();
    path
}

#[test]
fn every_manifest_passes_strict_schema_validation() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("k8s-manifests");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let files = write_manifests(&dir);
    assert_eq!(
        files
            .iter()
            .filter(|f| f.to_string_lossy().contains("/pod-"))
            .count(),
        25
    );
    assert!(
        files
            .iter()
            .any(|f| f.to_string_lossy().contains("/secret-"))
    );
    eprintln!("wrote {} manifests to {}", files.len(), dir.display());
    if !require_service("k8s-validate", validator().exists()) {
        return;
    }
    for file in &files {
        let (ok, output) = validate(std::slice::from_ref(file));
        assert!(ok, "{} does not validate:\n{output}", file.display());
        assert!(output.contains("passed"), "{output}");
    }
}

/// Breaks a manifest in one way.
type Breakage = fn(&mut serde_json::Value);

#[test]
fn a_broken_manifest_fails_validation() {
    if !require_service("k8s-validate", validator().exists()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("hunter2"),
    };
    let (_, config) = combos::all().remove(0);
    let template = WorkerTemplate::new(&config, &credentials, &WorkerOptions::default()).unwrap();
    let good = serde_json::to_value(template.pod(&"cd".repeat(16))).unwrap();
    let breakages: [(&str, Breakage); 3] = [
        ("an unknown field (strict)", |pod| {
            pod["spec"]["volumes"][0]["hostPath"]["pth"] = "/x".into()
        }),
        ("a label that is not a string", |pod| {
            pod["metadata"]["labels"]["codalab-wm/manager-id"] = 1.into()
        }),
        ("a missing mountPath", |pod| {
            pod["spec"]["containers"][0]["volumeMounts"][0]
                .as_object_mut()
                .unwrap()
                .remove("mountPath");
        }),
    ];
    for (what, breakage) in breakages {
        let mut broken = good.clone();
        breakage(&mut broken);
        let path = dir.path().join("broken.json");
        std::fs::write(&path, serde_json::to_vec(&broken).unwrap()).unwrap();
        let (ok, output) = validate(&[path]);
        assert!(!ok, "a pod with {what} passed:\n{output}");
        assert!(output.contains("did not validate"), "{what}: {output}");
    }
}
