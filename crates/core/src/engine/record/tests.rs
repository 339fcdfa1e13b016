//! The launch record on a real file system (a temporary directory).

use super::*;
use crate::backend::JobState;
use std::os::unix::fs::PermissionsExt;

const U1: &str = "0123456789abcdef0123456789abcdef";
const U2: &str = "fedcba9876543210fedcba9876543210";

fn job(unique: &str) -> WorkerJob {
    WorkerJob::new(format!("cl-worker-{unique}"), JobState::Active)
}

#[test]
fn launches_and_check_ins_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    {
        let mut record = LaunchRecord::open(&state, "slurm-batch job_name=x").unwrap();
        assert!(!record.holds(&job(U1)));
        record.reserve(U1, 0.0, None, unix_now());
        record.reserve(U2, 0.0, None, unix_now());
        assert!(record.holds(&job(U1)));
        assert!(!record.checkins_seen());
        record.checked_in_now([&job(U1)]);
        record.metered(
            vec![(490_000, 3600.0)],
            Duration::from_secs(1_764_000_000),
            true,
        );
    }
    let record = LaunchRecord::open(&state, "slurm-batch job_name=x").unwrap();
    assert!(record.holds(&job(U1)) && record.holds(&job(U2)));
    assert!(record.checked_in(&job(U1)));
    assert!(!record.checked_in(&job(U2)));
    assert!(record.checkins_seen());
    assert_eq!(record.usage(), [(490_000, 3600.0)]);
    assert_eq!(
        record.metered_until(),
        Some(Duration::from_secs(1_764_000_000))
    );
    let slurm = WorkerJob {
        name: format!("alice-codalab-slurm-worker-{U1}"),
        ..WorkerJob::new("4242", JobState::Active)
    };
    assert!(record.holds(&slurm), "matched by the name's unique too");
    let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let file = record.path().unwrap();
    let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn another_identity_has_its_own_record_and_one_identity_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = LaunchRecord::open(dir.path(), "k8s namespace=a").unwrap();
    a.reserve(U1, 0.0, None, unix_now());
    let b = LaunchRecord::open(dir.path(), "k8s namespace=b").unwrap();
    assert!(!b.holds(&job(U1)), "another pool identity does not own it");
    let err = LaunchRecord::open(dir.path(), "k8s namespace=a")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("another manager serves the pool k8s namespace=a"),
        "{err}"
    );
    drop(a);
    let again = LaunchRecord::open(dir.path(), "k8s namespace=a").unwrap();
    assert!(again.holds(&job(U1)));
}

#[test]
fn gone_jobs_are_forgotten_after_an_hour_listed_ones_never() {
    let mut record = LaunchRecord::in_memory("pool");
    record.reserve(U1, 0.0, None, unix_now());
    record.reserve(U2, 0.0, None, unix_now());
    // Both launched long ago; only U1 is still listed.
    for launch in record.contents.launches.values_mut() {
        launch.at -= 2 * 3600;
    }
    record.forget_gone(&[job(U1)], unix_now());
    assert!(record.holds(&job(U1)));
    assert!(!record.holds(&job(U2)));
    // A fresh launch not listed yet is kept.
    record.reserve(U2, 0.0, None, unix_now());
    record.forget_gone(&[], unix_now());
    assert!(record.holds(&job(U2)));
}

#[test]
fn a_broken_or_foreign_record_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let record = LaunchRecord::open(dir.path(), "pool").unwrap();
    let path = record.path().unwrap().to_owned();
    drop(record);
    std::fs::write(&path, b"{not json").unwrap();
    let err = LaunchRecord::open(dir.path(), "pool")
        .unwrap_err()
        .to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("move it away"), "{err}");
    std::fs::write(&path, br#"{"version":7,"identity":"pool","launches":{}}"#).unwrap();
    let err = LaunchRecord::open(dir.path(), "pool")
        .unwrap_err()
        .to_string();
    assert!(err.contains("version 7"), "{err}");
}

#[test]
fn a_state_dir_that_cannot_be_made_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let err = LaunchRecord::open(&file.join("state"), "pool")
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot create the launch record dir"), "{err}");
    assert!(err.contains("--record-dir"), "{err}");
}
