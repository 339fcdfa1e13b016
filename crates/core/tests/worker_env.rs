//! What a local worker gets of the manager's environment (review 2026-11-27 §3): the allow-list
//! (`WORKER_ENV`), the names the admin gives (`[worker] env`) and its CodaLab credentials;
//! never the cloud keys another pool reads from the manager's environment. Its own test binary:
//! it sets variables in its process environment, and nothing else runs beside it.
// The one test sets the manager's environment as a deployment would (`set_var` is unsafe).
#![allow(unsafe_code)]

use codalab_wm_core::local::{LocalBackend, LocalConfig};
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::{LaunchRequest, WorkerBackend, WorkerOptions};
use std::time::Duration;

/// Records the variables the test looks for, then waits to be stopped.
const STAND_IN: &str = "#!/bin/sh\n{\n  echo \"aws=${AWS_SECRET_ACCESS_KEY:-unset}\"\n  echo \"admin=${CODALAB_WM_TEST_SITE_VAR:-unset}\"\n  echo \"user=${CODALAB_USERNAME:-unset}\"\n  echo \"path=${PATH:+set}\"\n} > \"$0.env.tmp\" && mv \"$0.env.tmp\" \"$0.env\"\nexec sleep 300\n";

#[tokio::test]
async fn a_local_worker_gets_no_cloud_key_of_the_manager_but_the_names_the_admin_gives() {
    // SAFETY: this test binary runs this one test: no other thread reads the environment.
    unsafe {
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "manager-only-secret");
        std::env::set_var("CODALAB_WM_TEST_SITE_VAR", "site-value");
    }
    let dir = tempfile::tempdir().unwrap();
    let executable = dir.path().join("stand-in.sh");
    std::fs::write(&executable, STAND_IN).unwrap();
    std::fs::set_permissions(
        &executable,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let backend = LocalBackend::new(
        LocalConfig {
            state_dir: dir.path().join("state"),
            ..LocalConfig::default()
        },
        Credentials {
            username: "alice".into(),
            password: Secret::new("pw-123"),
        },
    )
    .unwrap();
    let worker = WorkerOptions {
        executable: executable.display().to_string(),
        server: "http://127.0.0.1:9".into(),
        env: vec!["CODALAB_WM_TEST_SITE_VAR".into()],
        ..WorkerOptions::default()
    };
    let job = backend
        .start_worker_job(&LaunchRequest {
            unique: "envcheck",
            worker: &worker,
            dry_run: false,
        })
        .await
        .unwrap();
    let env_file = format!("{}.env", executable.display());
    let mut seen = None;
    for _ in 0..500 {
        if let Ok(text) = std::fs::read_to_string(&env_file) {
            seen = Some(text);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    backend.stop_worker_job(&job).await.unwrap();
    let seen = seen.expect("the stand-in worker never wrote what it saw");
    assert_eq!(
        seen.lines().collect::<Vec<_>>(),
        ["aws=unset", "admin=site-value", "user=alice", "path=set"],
        "{seen}"
    );
}
