//! `cl-worker-manager down gce` (the real binary) against the fake Compute Engine API of
//! `crates/testkit/gce` on 127.0.0.1. **No emulator exists for Compute Engine**; the fake checks
//! every request against Google's discovery document. `down --dry-run` lists the live and the
//! stopped instances and changes nothing; `down` deletes every own instance, waits for the
//! delete operations, and leaves other instances alone. No CodaLab credentials are given.
#![cfg(feature = "gce")]

use codalab_wm_fake_gce::FakeCompute;
use std::path::Path;
use std::process::Output;

const BIN: &str = env!("CARGO_BIN_EXE_cl-worker-manager");

async fn down(args: &[&str], cwd: &Path) -> Output {
    tokio::process::Command::new(BIN)
        .arg("down")
        .args(args)
        .current_dir(cwd)
        .env_remove("CODALAB_USERNAME")
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
