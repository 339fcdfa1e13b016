//! The Slurm backend with the SSH transport against a real login node: a real OpenSSH `sshd` on
//! 127.0.0.1:2222 (`cargo xtask services up sshd`, key-only, its own host key) in front of the
//! real `slurmctld`/`slurmd` from Debian's slurm-wlm 22.05 packages (`services up slurm`).
//! Skipped locally when they are not running; under `CI=true` a missing service fails.

use crate::common;

use codalab_wm_core::backend::new_unique;
use codalab_wm_core::testing::run_conformance;
use codalab_wm_core::{Error, JobState, LaunchRequest, WorkerBackend};
use codalab_wm_slurm::{SlurmBackend, SlurmConfig};
use common::{
    NODE, Scratch, SlurmHarness, credentials, services_dir, sshd_available, wait_for_state,
};

fn ssh_config(scratch: &Scratch) -> SlurmConfig {
    let sshd = services_dir().join("sshd");
    let password_file = scratch.dir.path().join("password");
    std::fs::write(&password_file, "codalab-test\nnot-a-real-password\n").unwrap();
    SlurmConfig {
        ssh_host: Some("127.0.0.1:2222".into()),
        ssh_user: Some("root".into()),
        ssh_key: Some(sshd.join("client_ed25519")),
        ssh_known_hosts: Some(sshd.join("known_hosts")),
        password_file: Some(password_file),
        ..scratch.config()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance_suite_over_ssh() {
    if !sshd_available() {
        return;
    }
    let _node = NODE.lock().await;
    let scratch = Scratch::new();
    let config = ssh_config(&scratch);
    let harness = SlurmHarness::new(scratch, config);
    run_conformance(&harness).await.unwrap();
}

/// The worker started over SSH gets `--password-file` and its argv; one session serves every
/// command, and a cut connection is re-established on the next command.
#[tokio::test(flavor = "multi_thread")]
async fn worker_over_one_reused_session() {
    if !sshd_available() {
        return;
    }
    let _node = NODE.lock().await;
    let scratch = Scratch::new();
    let config = ssh_config(&scratch);
    let harness = SlurmHarness::new(Scratch::new(), config.clone());
    let backend = harness.build();
    let worker = scratch.worker("stand-in");
    let unique = new_unique();
    let job = backend
        .start_worker_job(&LaunchRequest {
            unique: &unique,
            worker: &worker,
            dry_run: false,
        })
        .await
        .unwrap();
    let job = wait_for_state(&backend, &job.id, JobState::Active).await;
    let argv = scratch.argv_of(&job).await;
    let password_file = config
        .password_file
        .as_ref()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let tail: Vec<_> = argv
        .iter()
        .rev()
        .take(5)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "--pass-down-termination",
            "--password-file",
            &password_file,
            "--gpuset",
            "NONE"
        ],
        "{argv:?}"
    );
    let ssh = backend.ssh().expect("ssh transport");
    assert_eq!(ssh.connections(), 1, "one session for every command so far");

    ssh.cut_connection();
    let listed = backend.get_worker_jobs().await.unwrap();
    assert!(listed.iter().any(|j| j.id == job.id), "{listed:?}");
    assert_eq!(ssh.connections(), 2, "re-established after the cut");

    backend.stop_worker_job(&job).await.unwrap();
    wait_for_state(&backend, &job.id, JobState::Ended).await;
    assert_eq!(ssh.connections(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_worker_is_failed_over_ssh() {
    if !sshd_available() {
        return;
    }
    let _node = NODE.lock().await;
    let scratch = Scratch::new();
    let backend = SlurmBackend::new(&ssh_config(&scratch), Some(credentials())).unwrap();
    let worker = scratch.worker("failing");
    let unique = new_unique();
    let job = backend
        .start_worker_job(&LaunchRequest {
            unique: &unique,
            worker: &worker,
            dry_run: false,
        })
        .await
        .unwrap();
    let failed = wait_for_state(&backend, &job.id, JobState::Failed).await;
    assert_eq!(
        failed.reason.as_deref(),
        Some("NonZeroExitCode"),
        "{failed:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_partition_over_ssh_is_a_permanent_error_with_slurms_message() {
    if !sshd_available() {
        return;
    }
    let scratch = Scratch::new();
    let config = SlurmConfig {
        partition: Some("nosuch".into()),
        ..ssh_config(&scratch)
    };
    let backend = SlurmBackend::new(&config, Some(credentials())).unwrap();
    let worker = scratch.worker("stand-in");
    let unique = new_unique();
    let err = backend
        .start_worker_job(&LaunchRequest {
            unique: &unique,
            worker: &worker,
            dry_run: false,
        })
        .await
        .unwrap_err();
    assert!(!err.is_temporary(), "{err}");
    assert!(
        err.to_string().contains("Invalid partition name specified"),
        "{err}"
    );
}

/// An unknown host key and a changed one are refused, with the host and the file named.
#[tokio::test(flavor = "multi_thread")]
async fn unknown_or_changed_host_keys_are_refused() {
    if !sshd_available() {
        return;
    }
    let scratch = Scratch::new();
    let empty = scratch.dir.path().join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    let wrong = scratch.dir.path().join("wrong_known_hosts");
    let other_key =
        std::fs::read_to_string(services_dir().join("sshd/client_ed25519.pub")).unwrap();
    let other_key: Vec<_> = other_key.split_whitespace().take(2).collect();
    std::fs::write(
        &wrong,
        format!("[127.0.0.1]:2222 {}\n", other_key.join(" ")),
    )
    .unwrap();
    for (file, why) in [
        (&empty, "is not in known_hosts file"),
        (&wrong, "presented a host key different"),
    ] {
        let config = SlurmConfig {
            ssh_known_hosts: Some(file.clone()),
            ..ssh_config(&scratch)
        };
        let backend = SlurmBackend::new(&config, Some(credentials())).unwrap();
        let err = backend.get_worker_jobs().await.unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("ssh host 127.0.0.1:2222") && message.contains(why),
            "{message}"
        );
        assert!(message.contains(&file.display().to_string()), "{message}");
    }
}

/// A key the server does not accept is a clear, permanent error.
#[tokio::test(flavor = "multi_thread")]
async fn unauthorized_key_is_refused() {
    if !sshd_available() {
        return;
    }
    let scratch = Scratch::new();
    let key = scratch.dir.path().join("stranger");
    common::run(
        "ssh-keygen",
        &["-q", "-t", "ed25519", "-N", "", "-f", key.to_str().unwrap()],
    );
    let config = SlurmConfig {
        ssh_key: Some(key.clone()),
        ..ssh_config(&scratch)
    };
    let backend = SlurmBackend::new(&config, Some(credentials())).unwrap();
    let err = backend.get_worker_jobs().await.unwrap_err();
    assert!(!err.is_temporary(), "{err}");
    assert!(err.to_string().contains("refused key"), "{err}");
}
