//! What a Slurm job gets of the manager's environment, on the real cluster (`cargo xtask
//! services up slurm`; review 2026-11-27 §3): the allow-list, the names the admin gives
//! (`[worker] env`) and the credentials; never a cloud key another pool reads from the
//! manager's environment (sbatch's default `--export=ALL` stored it with every job). Its own
//! test binary: it sets variables in its process environment, and nothing else runs beside it.
// The one test sets the manager's environment as a deployment would (`set_var` is unsafe).
#![allow(unsafe_code)]

mod common;

use codalab_wm_core::backend::new_unique;
use codalab_wm_core::{JobState, LaunchRequest, WorkerBackend, WorkerOptions};
use common::{NODE, Scratch, SlurmHarness, run, slurm_available};
use std::time::Duration;

/// Records the variables the test looks for next to itself, then exits.
const PROBE: &str = "#!/bin/sh\nid=unknown\nprev=\nfor arg in \"$@\"; do [ \"$prev\" = --id ] && id=$arg; prev=$arg; done\n{\n  echo \"aws=${AWS_SECRET_ACCESS_KEY:-unset}\"\n  echo \"admin=${CODALAB_WM_TEST_SITE_VAR:-unset}\"\n  echo \"user=${CODALAB_USERNAME:-unset}\"\n  echo \"path=${PATH:+set}\"\n} > \"$(dirname \"$0\")/env-$id.tmp\" && mv \"$(dirname \"$0\")/env-$id.tmp\" \"$(dirname \"$0\")/env-$id\"\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_slurm_job_gets_no_cloud_key_of_the_manager_but_the_names_the_admin_gives() {
    if !slurm_available() {
        return;
    }
    // SAFETY: this test binary runs this one test: no other thread reads the environment.
    unsafe {
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "manager-only-secret");
        std::env::set_var("CODALAB_WM_TEST_SITE_VAR", "site-value");
    }
    let _node = NODE.lock().await;
    let scratch = Scratch::new();
    let probe = scratch.dir.path().join("env-probe");
    std::fs::write(&probe, PROBE).unwrap();
    run("chmod", &["755", probe.to_str().unwrap()]);
    let harness = SlurmHarness::new(Scratch::new(), scratch.config());
    let backend = harness.build();
    let worker = WorkerOptions {
        env: vec!["CODALAB_WM_TEST_SITE_VAR".into()],
        ..scratch.worker("env-probe")
    };
    let job = backend
        .start_worker_job(&LaunchRequest {
            unique: &new_unique(),
            worker: &worker,
            dry_run: false,
        })
        .await
        .unwrap();
    assert_ne!(job.state, JobState::Failed);
    let path = scratch.dir.path().join(format!("env-host-{}", job.name));
    let mut seen = None;
    for _ in 0..300 {
        if let Ok(text) = std::fs::read_to_string(&path) {
            seen = Some(text);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seen = seen.unwrap_or_else(|| panic!("job {} never ran its probe", job.id));
    assert_eq!(
        seen.lines().collect::<Vec<_>>(),
        [
            "aws=unset",
            "admin=site-value",
            "user=codalab-test",
            "path=set"
        ],
        "{seen}"
    );
}
