//! `deploy/kubernetes/monitoring` (for clusters with the Prometheus Operator), checked offline:
//!
//! - `prometheus-rule.yaml` is `deploy/prometheus/codalab-wm.rules.yml` (the rules' one home,
//!   unit-tested by `crates/cli/tests/it/prometheus.rs`) wrapped in a PrometheusRule;
//!   `UPDATE_GOLDEN=1` rewrites it;
//! - `kubectl kustomize` (Debian's `kubernetes-client`) renders the kustomization into that
//!   PrometheusRule and two PodMonitors, each of which selects the pods of a Deployment in
//!   `deploy/kubernetes`, in the namespace that Deployment is installed to, and scrapes a port
//!   those pods declare.
//!
//! - every rendered object validates strictly (an unknown field is an error, as with `kubectl
//!   apply --validate=strict`) against the Prometheus Operator's own CRD schemas (v0.80.1, from
//!   PyPI `cloudcoil-models-prometheus-operator`, installed by `cargo xtask services up
//!   k8s-validate`; `xtask/services/k8s-validate/monitoring_crds.py`).
//!
//! Without kubectl or the validator those tests skip, and fail under `CI=true`.

use codalab_wm_core::testing::require_service;
use serde::Deserialize;
use serde_yaml::Value;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The PrometheusRule for the rules file's `groups:`.
fn prometheus_rule(rules: &str) -> String {
    let groups = &rules[rules.find("\ngroups:\n").expect("a `groups:` key") + 1..];
    let spec: String = groups.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "# Generated from deploy/prometheus/codalab-wm.rules.yml (edit that file, then run\n\
         # `UPDATE_GOLDEN=1 cargo test -p codalab-wm-operator --test it monitoring`).\n\
         apiVersion: monitoring.coreos.com/v1\n\
         kind: PrometheusRule\n\
         metadata:\n  name: codalab-wm\n  labels:\n    app.kubernetes.io/name: codalab-wm\n\
         spec:\n{}",
        spec.replace("  \n", "\n")
    )
}

#[test]
fn the_prometheus_rule_holds_the_rules_file() {
    let rules =
        std::fs::read_to_string(repo().join("deploy/prometheus/codalab-wm.rules.yml")).unwrap();
    let file = repo().join("deploy/kubernetes/monitoring/prometheus-rule.yaml");
    codalab_wm_core::testing::check_generated(
        &file,
        &prometheus_rule(&rules),
        "cargo test -p codalab-wm-operator --test it monitoring",
    );
    let checked_in = std::fs::read_to_string(&file).unwrap();
    let rule: Value = serde_yaml::from_str(&checked_in).unwrap();
    let file: Value = serde_yaml::from_str(&rules).unwrap();
    assert_eq!(rule["spec"]["groups"], file["groups"]);
    assert_eq!(file["groups"][0]["rules"].as_sequence().unwrap().len(), 9);
}

/// The pods' labels, port names and namespace of every Deployment in `deploy/kubernetes` (one
/// file each). The manager's namespace is the one its header applies it to, where its config
/// starts the worker pods; the operator's is its kustomization's.
fn deployments() -> Vec<(Value, Vec<String>, &'static str)> {
    let files = [
        ("manager.yaml", "codalab-workers"),
        ("operator/deployment.yaml", "codalab-wm"),
    ];
    let dir = repo().join("deploy/kubernetes");
    let manager = std::fs::read_to_string(dir.join("manager.yaml")).unwrap();
    assert!(manager.contains("kubectl -n codalab-workers apply -f manager.yaml"));
    assert!(manager.contains("namespace = \"codalab-workers\""));
    let operator = std::fs::read_to_string(dir.join("operator/kustomization.yaml")).unwrap();
    assert!(operator.contains("\nnamespace: codalab-wm\n"));
    let mut pods = Vec::new();
    for (file, namespace) in files {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let object = Value::deserialize(document).unwrap();
            if object["kind"] != "Deployment" {
                continue;
            }
            let template = &object["spec"]["template"];
            let ports = template["spec"]["containers"]
                .as_sequence()
                .unwrap()
                .iter()
                .flat_map(|c| c["ports"].as_sequence().cloned().unwrap_or_default())
                .map(|p| p["name"].as_str().unwrap().to_owned())
                .collect();
            pods.push((template["metadata"]["labels"].clone(), ports, namespace));
        }
    }
    pods
}

/// `kubectl kustomize deploy/kubernetes/monitoring`; `None` when kubectl is missing (outside CI).
fn rendered() -> Option<String> {
    let kubectl = Path::new("/usr/bin/kubectl");
    if !require_service("kubectl", kubectl.exists()) {
        return None;
    }
    let dir = repo().join("deploy/kubernetes/monitoring");
    let output = Command::new(kubectl)
        .arg("kustomize")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(String::from_utf8(output.stdout).unwrap())
}

/// Runs `monitoring_crds.py` on `objects`: its success and what it printed.
fn validate_crds(python: &Path, objects: &str) -> (bool, String) {
    let script = repo().join("xtask/services/k8s-validate/monitoring_crds.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(objects.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// Strict validation against the Prometheus Operator's CRD schemas: the rendered objects pass,
/// and the validator is strict (a misspelt field and a malformed duration are refused, by name).
#[test]
fn the_monitoring_objects_validate_strictly_against_the_operators_crds() {
    let services = codalab_wm_core::testing::services_dir();
    let python = services.join("k8s-validate/venv/bin/python");
    if !require_service("k8s-validate", python.exists()) {
        return;
    }
    let Some(text) = rendered() else { return };
    let (ok, out) = validate_crds(&python, &text);
    assert!(ok, "{out}");
    assert!(
        out.contains("3 monitoring.coreos.com object(s) valid"),
        "{out}"
    );

    let misspelt = text.replacen(
        "    path: /metrics\n",
        "    path: /metrics\n    pth: /x\n",
        1,
    );
    assert_ne!(misspelt, text);
    let (ok, out) = validate_crds(&python, &misspelt);
    assert!(!ok && out.contains("'pth' was unexpected"), "{out}");
    let duration = text.replacen("for: 10m", "for: 10 minutes", 1);
    assert_ne!(duration, text);
    let (ok, out) = validate_crds(&python, &duration);
    assert!(
        !ok && out.contains(".for: '10 minutes' does not match"),
        "{out}"
    );
}

#[test]
fn the_kustomization_renders_podmonitors_that_find_the_pods_and_their_ports() {
    let Some(text) = rendered() else { return };
    let objects: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["PodMonitor", "PodMonitor", "PrometheusRule"],
        "{text}"
    );
    let pods = deployments();
    for monitor in objects.iter().filter(|o| o["kind"] == "PodMonitor") {
        assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(monitor["metadata"]["namespace"], "codalab-wm");
        let selector = monitor["spec"]["selector"]["matchLabels"]
            .as_mapping()
            .unwrap();
        let endpoints = monitor["spec"]["podMetricsEndpoints"]
            .as_sequence()
            .unwrap();
        let matched: Vec<(&Vec<String>, &str)> = pods
            .iter()
            .filter(|(labels, ..)| selector.iter().all(|(k, v)| labels[k] == *v))
            .map(|(_, ports, namespace)| (ports, *namespace))
            .collect();
        let name = &monitor["metadata"]["name"];
        assert_eq!(matched.len(), 1, "{name:?} selects one Deployment's pods");
        // Without a namespaceSelector a PodMonitor selects the pods of its own namespace only.
        let namespaces: Vec<&str> =
            match monitor["spec"]["namespaceSelector"]["matchNames"].as_sequence() {
                Some(names) => names.iter().map(|n| n.as_str().unwrap()).collect(),
                None => vec![monitor["metadata"]["namespace"].as_str().unwrap()],
            };
        let (ports, namespace) = matched[0];
        assert!(
            namespaces.contains(&namespace),
            "{name:?} looks in {namespaces:?}, its pods run in {namespace}"
        );
        for endpoint in endpoints {
            let port = endpoint["port"].as_str().unwrap();
            assert!(ports.iter().any(|p| p == port), "{name:?}: no port {port}");
            assert_eq!(endpoint["path"], "/metrics");
        }
    }
}

/// Every `codalab_wm_operator_*` metric the rules name is one the operator serves (a counter
/// by its `_total` sample), with the labels the rules select on.
#[test]
fn the_operator_rules_name_metrics_the_operator_serves() {
    use codalab_wm_operator::crd::CodaLabWorkerPoolStatus;
    use codalab_wm_operator::metrics::OperatorMetrics;
    let metrics = OperatorMetrics::default();
    metrics.set_leader(true);
    metrics.reconciled("ok");
    metrics.reconciled("error");
    metrics.pool("ns", "cpu", (0, 2), &CodaLabWorkerPoolStatus::default());
    let served = metrics.render();
    let rules =
        std::fs::read_to_string(repo().join("deploy/prometheus/codalab-wm.rules.yml")).unwrap();
    let mut named = 0;
    for (at, _) in rules.match_indices("codalab_wm_operator_") {
        let selector: String = rules[at..]
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != ')' && *c != '[')
            .collect();
        named += 1;
        let sample = selector.split('{').next().unwrap();
        let labels = selector
            .split_once('{')
            .map(|(_, l)| l.trim_end_matches('}'));
        let labels = labels.unwrap_or_default();
        let found = (served.lines()).any(|l| l.starts_with(sample) && l.contains(labels));
        assert!(found, "{selector} is not served:\n{served}");
    }
    assert!(named >= 4, "{named}");
}
