//! `deploy/grafana/codalab-wm.json` against Grafana's own schema for dashboard JSON: npm
//! `@grafana/schema` 13.2.3 (the types Grafana generates from its CUE schemas), checked by the
//! TypeScript compiler (`xtask/services/grafana-schema/check-dashboard.sh`, installed by `cargo
//! xtask services up grafana-schema`). No Grafana server can be installed here, so the dashboard
//! is not rendered; its queries are run against a real Prometheus by `prometheus.rs`.
//!
//! Without the service the test skips, and fails under `CI=true`.

use codalab_wm_core::testing::require_service;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Runs the checker on `dashboard`: its success and what it printed.
fn check(dashboard: &Path) -> (bool, String) {
    let output = Command::new("bash")
        .arg(repo().join("xtask/services/grafana-schema/check-dashboard.sh"))
        .arg(dashboard)
        .current_dir(repo())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// The dashboard type-checks, and the check is strict: a misspelt panel field and a misspelt
/// field option are refused by name.
#[test]
fn the_dashboard_is_valid_against_grafanas_schema() {
    let services = codalab_wm_core::testing::services_dir();
    let tsc = services.join("grafana-schema/node_modules/.bin/tsc");
    if !require_service("grafana-schema", tsc.exists()) {
        return;
    }
    let dashboard = repo().join("deploy/grafana/codalab-wm.json");
    let (ok, out) = check(&dashboard);
    assert!(ok, "{out}");
    assert!(out.contains("a valid Grafana dashboard"), "{out}");

    let text = std::fs::read_to_string(&dashboard).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let broken = |name: &str, from: &str, to: &str| {
        let changed = text.replacen(from, to, 1);
        assert_ne!(changed, text, "{from} is in the dashboard");
        let path = dir.path().join(name);
        std::fs::write(&path, changed).unwrap();
        check(&path)
    };
    let (ok, out) = broken("panel.json", "\"gridPos\"", "\"gridpos\"");
    assert!(
        !ok && out.contains("'\"gridpos\"' does not exist in type 'Panel'"),
        "{out}"
    );
    let (ok, out) = broken("unit.json", "\"unit\"", "\"units\"");
    assert!(!ok && out.contains("'\"units\"' does not exist"), "{out}");
}
