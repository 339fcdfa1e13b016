//! `cl-worker-manager down gce` (the real binary) against the fake Compute Engine API of
//! `crates/testkit/gce` on 127.0.0.1. **No emulator exists for Compute Engine**; the fake checks
//! every request against Google's discovery document. `down --dry-run` lists the live and the
//! stopped instances and changes nothing; `down` deletes every own instance, waits for the
//! delete operations, and leaves other instances alone. No CodaLab credentials are given
//! (`--all-origins`: without them a GCE pool's `down` refuses).
#![cfg(feature = "gce")]

use codalab_wm_fake_gce::FakeCompute;
use std::path::Path;
use std::process::Output;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

async fn down(args: &[&str], cwd: &Path) -> Output {
    down_as(None, args, cwd).await
}

/// `down` with `CODALAB_USERNAME` set to `user` (the password is not needed).
async fn down_as(user: Option<&str>, args: &[&str], cwd: &Path) -> Output {
    let mut command = tokio::process::Command::new(BIN);
    if let Some(user) = user {
        command.env("CODALAB_USERNAME", user);
    } else {
        command.env_remove("CODALAB_USERNAME");
    }
    command
        .args(["down", "--all-origins"])
        .args(args)
        .current_dir(cwd)
        .env_remove("CODALAB_PASSWORD")
        .env_remove("CODALAB_WM_LOG")
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .env("NO_COLOR", "1")
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn down_lists_then_deletes_every_own_instance() {
    let fake = FakeCompute::start("test-project").await.unwrap();
    fake.set_operation_steps(3);
    let own = [
        ("codalab-wm-manager", "codalab-wm"),
        ("codalab-wm-pool", "default"),
    ];
    fake.insert_instance("us-central1-a", "cl-worker-live", &own, "RUNNING");
    fake.insert_instance("us-central1-b", "cl-worker-stopped", &own, "TERMINATED");
    fake.insert_instance(
        "us-central1-a",
        "cl-worker-other",
        &[("codalab-wm-manager", "x")],
        "RUNNING",
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wm.toml");
    let text = format!(
        "backend = \"gce\"\n[gce]\nproject = \"test-project\"\nzones = [\"us-central1-a\", \"us-central1-b\"]\n\
         password_secret = \"codalab-password\"\napi_endpoint = \"{}\"\nmetadata_url = \"{}\"\n",
        fake.api_url(),
        fake.url()
    );
    std::fs::write(&config, text).unwrap();
    let config = config.display().to_string();

    let out = down(&["--dry-run", "--config", &config], dir.path()).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("cl-worker-live") && l.contains("would stop")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("cl-worker-stopped") && l.contains("would remove")),
        "{stdout}"
    );
    assert!(!stdout.contains("cl-worker-other"), "{stdout}");
    assert!(
        stdout.contains("dry run: would stop 1 job(s) and remove 1 resource(s)"),
        "{stdout}"
    );
    assert_eq!(fake.instances().len(), 3, "a dry run changes nothing");

    let out = down(&["--config", &config], dir.path()).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("stopped 1 job(s), removed 1 resource(s)"),
        "{stdout}"
    );
    let left: Vec<String> = fake.instances().into_iter().map(|i| i.name).collect();
    assert_eq!(left, ["cl-worker-other"]);
    assert_eq!(
        fake.pending_operations(),
        0,
        "down waited for the delete operations"
    );
    assert!(fake.requests().iter().all(|r| r.rejection.is_none()));
}

/// Two deployments under the default `manager_id` and pool with two servers (#28 item 4):
/// `down` of the one whose workers' user it knows (`CODALAB_USERNAME`, no password) deletes
/// its instance and the one without an origin label (an older version's), not the other
/// server's; without the user it cannot tell, says so, and deletes all three.
#[tokio::test(flavor = "multi_thread")]
async fn down_leaves_another_deployments_instances_when_it_knows_the_user() {
    use codalab_wm_core::backend::origin;
    let fake = FakeCompute::start("test-project").await.unwrap();
    fn labels(origin: &str) -> Vec<(&str, &str)> {
        let mut labels = vec![
            ("codalab-wm-manager", "codalab-wm"),
            ("codalab-wm-pool", "default"),
        ];
        if !origin.is_empty() {
            labels.push(("codalab-wm-origin", origin));
        }
        labels
    }
    let ours = origin("http://127.0.0.1:1", "alice");
    let theirs = origin("http://127.0.0.1:2", "alice");
    fake.insert_instance("us-central1-a", "cl-worker-ours", &labels(&ours), "RUNNING");
    fake.insert_instance(
        "us-central1-a",
        "cl-worker-theirs",
        &labels(&theirs),
        "RUNNING",
    );
    fake.insert_instance("us-central1-a", "cl-worker-older", &labels(""), "RUNNING");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wm.toml");
    let text = format!(
        "backend = \"gce\"\nserver = \"http://127.0.0.1:1\"\n[gce]\nproject = \"test-project\"\n\
         zones = [\"us-central1-a\"]\npassword_secret = \"codalab-password\"\n\
         api_endpoint = \"{}\"\nmetadata_url = \"{}\"\n",
        fake.api_url(),
        fake.url()
    );
    std::fs::write(&config, text).unwrap();
    let config = config.display().to_string();

    let out = down_as(Some("alice"), &["--config", &config], dir.path()).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let left: Vec<String> = fake.instances().into_iter().map(|i| i.name).collect();
    assert_eq!(left, ["cl-worker-theirs"], "{stdout}");

    let out = down(&["--config", &config], dir.path()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("down does not know the workers' CodaLab user"),
        "{stderr}"
    );
    assert!(fake.instances().is_empty(), "every origin without the user");
}
