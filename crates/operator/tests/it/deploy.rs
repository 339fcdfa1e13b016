//! The install files in `deploy/kubernetes/operator/` are valid, checked offline (there is no
//! real Kubernetes API server on these machines):
//!
//! - `crd.yaml` is what the Rust types generate (`UPDATE_GOLDEN=1` rewrites it);
//! - `kubectl kustomize` (Debian's `kubernetes-client`) renders the kustomization, and every
//!   object it renders passes `kubernetes-validate --strict` against the official Kubernetes
//!   1.37 schemas (PyPI `kubernetes-validate`, `cargo xtask services up k8s-validate`), the
//!   CRD against the apiextensions schema;
//! - the sample pool validates against the CRD's own `openAPIV3Schema` (Python `jsonschema`
//!   of that venv, unknown fields refused as the API server's strict field validation does), and
//!   broken samples do not.
//!
//! - `deploy/kubernetes/operator-namespaced` (a Role and `--watch-namespace` instead of the
//!   ClusterRole) renders and validates the same way.
//!
//! Without the validator or kubectl the tests skip, and fail under `CI=true`.

use codalab_wm_core::testing::require_service;
use codalab_wm_operator::crd::crd_yaml;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn dir() -> PathBuf {
    repo().join("deploy/kubernetes/operator")
}

fn venv() -> PathBuf {
    let services = codalab_wm_core::testing::services_dir();
    services.join("k8s-validate/venv/bin")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn the_checked_in_crd_is_the_generated_one() {
    codalab_wm_core::testing::check_generated(
        &dir().join("crd.yaml"),
        &crd_yaml(),
        "cargo test -p codalab-wm-operator --test it deploy (or `cl-worker-manager operator crd`)",
    );
}

#[test]
fn every_rendered_object_validates_strictly() {
    let common = [
        "namespace/codalab-wm",
        "customresourcedefinition/codalabworkerpools.codalab.org",
        "serviceaccount/codalab-wm-operator",
        "role/codalab-wm-operator-leader",
        "rolebinding/codalab-wm-operator-leader",
        "deployment/codalab-wm-operator",
        "networkpolicy/codalab-wm-operator",
    ];
    let cluster = [
        "clusterrole/codalab-wm-operator",
        "clusterrolebinding/codalab-wm-operator",
    ];
    let Some(rendered) = validate(&dir(), &[&common[..], &cluster[..]].concat()) else {
        return;
    };
    // The namespaced variant: a Role instead of the ClusterRole, and --watch-namespace.
    let namespaced = [
        "role/codalab-wm-operator",
        "rolebinding/codalab-wm-operator",
    ];
    let confined = repo().join("deploy/kubernetes/operator-namespaced");
    let only = validate(&confined, &[&common[..], &namespaced[..]].concat()).unwrap();
    assert!(!only.contains("kind: ClusterRole"), "{only}");
    assert!(
        only.contains("- --watch-namespace\n        - codalab-wm\n"),
        "{only}"
    );

    let file = tempfile::NamedTempFile::new().unwrap();
    let broken = rendered.replace("replicas: 2", "replica: 2");
    std::fs::write(file.path(), broken).unwrap();
    let output = Command::new(venv().join("kubernetes-validate"))
        .args(["--strict", "-k", "1.37.0"])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "an unknown field must fail: {}",
        text(&output)
    );
}

/// Renders the kustomization in `dir` and validates every object strictly; the objects that
/// pass must be `expected` (plus the sample pool, which has no built-in schema). Returns the
/// rendered YAML, or `None` when the tools are missing (skipped).
fn validate(dir: &Path, expected: &[&str]) -> Option<String> {
    let kubectl = Path::new("/usr/bin/kubectl");
    let validator = venv().join("kubernetes-validate");
    if !require_service("kubectl", kubectl.exists())
        || !require_service("k8s-validate", validator.exists())
    {
        return None;
    }
    let rendered = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap();
    assert!(rendered.status.success(), "{}", text(&rendered));
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &rendered.stdout).unwrap();
    let output = Command::new(&validator)
        .args(["--strict", "-k", "1.37.0"])
        .arg(file.path())
        .output()
        .unwrap();
    let report = text(&output);
    for object in expected {
        assert!(
            report.contains(&format!("passed for resource {object} ")),
            "{object} did not pass:\n{report}"
        );
    }
    let passed = report.matches(" passed for resource ").count();
    assert_eq!(passed, expected.len(), "{report}");
    // The sample pool has no built-in schema: it is checked against the CRD below.
    assert!(report.contains("kind CodaLabWorkerPool"), "{report}");
    assert!(!report.contains("ERROR"), "{report}");
    Some(rendered_text(&rendered))
}

fn rendered_text(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// Validates `pool` (YAML) against the CRD's `openAPIV3Schema`, with objects closed to unknown
/// fields; returns (valid, report).
fn validate_pool(pool: &str) -> (bool, String) {
    const SCRIPT: &str = r#"
import sys, yaml, jsonschema
crd = yaml.safe_load(open(sys.argv[1]))
schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
def close(node):
    if isinstance(node, dict):
        if "properties" in node and "additionalProperties" not in node \
                and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
        for value in node.values():
            close(value)
    elif isinstance(node, list):
        for value in node:
            close(value)
close(schema)
schema["properties"]["metadata"] = {"type": "object"}
schema["properties"]["apiVersion"] = {"enum": ["codalab.org/v1alpha1"]}
schema["properties"]["kind"] = {"enum": ["CodaLabWorkerPool"]}
pool = yaml.safe_load(open(sys.argv[2]))
errors = list(jsonschema.Draft7Validator(schema).iter_errors(pool))
for error in errors:
    print("invalid:", list(error.absolute_path), error.message)
if not errors:
    print("valid")
sys.exit(1 if errors else 0)
"#;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), pool).unwrap();
    let output = Command::new(venv().join("python"))
        .args(["-c", SCRIPT])
        .arg(dir().join("crd.yaml"))
        .arg(file.path())
        .output()
        .unwrap();
    (output.status.success(), text(&output))
}

#[test]
fn the_sample_pool_validates_against_the_crds_schema() {
    if !require_service("k8s-validate", venv().join("python").exists()) {
        return;
    }
    let sample = std::fs::read_to_string(dir().join("sample-pool.yaml")).unwrap();
    let (valid, report) = validate_pool(&sample);
    assert!(valid, "{report}");
    let breakages = [
        ("maxWorkers: 4", "max: 4", "an unknown field"),
        ("max: four", "max: 4", "a string for an integer"),
        (
            "launchMode: burst\n  max: 4",
            "max: 4",
            "an unknown launch mode",
        ),
        ("#", "credentialsSecret", "a missing required field"),
        // The API server stores int64: without a maximum this pool would be stored, and no
        // u32 reads it back (review §5.3).
        ("max: 5000000000", "max: 4", "an integer beyond u32"),
    ];
    for (replacement, original, what) in breakages {
        let broken = sample.replacen(original, replacement, 1);
        assert_ne!(broken, sample, "{what}");
        let (valid, report) = validate_pool(&broken);
        assert!(
            !valid && report.contains("invalid:"),
            "{what} must fail:\n{report}"
        );
    }
    // The Rust types read the sample too.
    let pool: codalab_wm_operator::crd::CodaLabWorkerPool =
        serde_json::from_value(yaml_to_json(&sample)).unwrap();
    assert_eq!((pool.spec.min, pool.spec.max), (1, 4));
}

fn yaml_to_json(text: &str) -> serde_json::Value {
    serde_yaml::from_str(text).unwrap()
}
