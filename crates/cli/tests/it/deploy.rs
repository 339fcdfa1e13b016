//! The deployment files in `deploy/` are valid: the Kubernetes manifests pass strict validation
//! against the official Kubernetes 1.37 schemas (PyPI `kubernetes-validate`, installed by
//! `cargo xtask services up k8s-validate`), a deliberately broken copy fails it, and the
//! manager's config embedded in the ConfigMap is accepted by the manager's own config parser.

use codalab_wm_core::testing::require_service;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn validator() -> PathBuf {
    let dir = codalab_wm_core::testing::services_dir();
    dir.join("k8s-validate/venv/bin/kubernetes-validate")
}

fn validate(file: &Path) -> std::process::Output {
    Command::new(validator())
        .args(["--strict", "-k", "1.37.0"])
        .arg(file)
        .output()
        .unwrap()
}

#[test]
fn kubernetes_manifests_validate_strictly_and_a_broken_one_fails() {
    if !require_service("k8s-validate", validator().exists()) {
        return;
    }
    let manifest = repo().join("deploy/kubernetes/manager.yaml");
    let output = validate(&manifest);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{text}");
    for kind in [
        "serviceaccount",
        "role",
        "rolebinding",
        "configmap",
        "persistentvolumeclaim",
        "deployment",
        "networkpolicy",
    ] {
        assert!(
            text.to_lowercase().contains(&format!("{kind}/codalab-wm")),
            "{kind} not validated:\n{text}"
        );
    }

    let broken = tempfile::NamedTempFile::new().unwrap();
    let original = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        broken.path(),
        original.replace("mountPath: /etc/codalab-wm", "mountPth: /etc/codalab-wm"),
    )
    .unwrap();
    assert!(
        !validate(broken.path()).status.success(),
        "the validator must reject an unknown field"
    );
}

#[test]
fn the_configmap_config_is_accepted_by_the_manager() {
    let manifest = std::fs::read_to_string(repo().join("deploy/kubernetes/manager.yaml")).unwrap();
    let start = manifest.find("config.toml: |\n").unwrap() + "config.toml: |\n".len();
    let config: String = manifest[start..]
        .lines()
        .take_while(|l| l.starts_with("    ") || l.is_empty())
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    assert!(config.contains("[kubernetes]"));
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &config).unwrap();
    // `--dry-run --once` with no credentials stops right after the config is read and checked.
    let output = Command::new(env!("CARGO_BIN_EXE_cl-worker-manager"))
        .args([
            "--config",
            file.path().to_str().unwrap(),
            "--once",
            "--dry-run",
        ])
        .env_remove("CODALAB_USERNAME")
        .env_remove("CODALAB_PASSWORD")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let compiled_in = !stderr.contains("is not compiled in");
    if compiled_in {
        assert!(
            stderr.contains("no CodaLab credentials"),
            "the config must parse: {stderr}"
        );
    }
}

#[test]
fn the_systemd_unit_keeps_the_password_off_the_command_line() {
    let unit =
        std::fs::read_to_string(repo().join("deploy/systemd/cl-worker-manager.service")).unwrap();
    let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    assert!(
        exec.contains("--password-file ${CREDENTIALS_DIRECTORY}/"),
        "{exec}"
    );
    assert!(
        unit.lines()
            .any(|l| l.starts_with("LoadCredential=codalab-password:"))
    );
    assert!(!unit.contains("CODALAB_PASSWORD="));
}
