//! The Slurm backend with the local transport against a real cluster: real `slurmctld` and
//! `slurmd` from Debian's slurm-wlm 22.05 packages on 127.0.0.1, started by
//! `cargo xtask services up slurm`. Skipped locally when the cluster is not running; under
//! `CI=true` a missing cluster fails the tests.

use crate::common;

use codalab_wm_core::backend::new_unique;
use codalab_wm_core::testing::run_conformance;
use codalab_wm_core::{JobState, LaunchRequest, WorkerBackend};
use codalab_wm_slurm::{SlurmBackend, SlurmConfig};
use common::{NODE, Scratch, SlurmHarness, credentials, slurm_available, wait_for_state};

#[tokio::test(flavor = "multi_thread")]
async fn conformance_suite() {
    if !slurm_available() {
        return;
    }
    let _node = NODE.lock().await;
    let scratch = Scratch::new();
    let config = scratch.config();
    let harness = SlurmHarness::new(scratch, config);
    run_conformance(&harness).await.unwrap();
}

/// The worker runs through `srun` with upstream's argv, and gets the credentials from the
/// environment sbatch hands down (they are in no file).
#[tokio::test(flavor = "multi_thread")]
async fn worker_gets_its_argv_and_credentials() {
    if !slurm_available() {
        return;
    }
    let _node = NODE.lock().await;
    let scratch = Scratch::new();
    let harness = SlurmHarness::new(Scratch::new(), scratch.config());
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
    let user = &backend.settings().user;
    let worker_id = format!("{user}-{}-{unique}", harness.config.job_name);
    assert_eq!(job.name, worker_id);
    let expected_start = [
        "--server",
        "http://127.0.0.1:9",
        "--verbose",
        "--exit-when-idle",
        "--idle-seconds",
        "600",
        "--work-dir",
        &format!("{user}-codalab-SlurmBatchWorkerManager-scratch/workdir"),
        "--id",
        &format!("host-{worker_id}"),
    ];
    assert_eq!(argv[..expected_start.len()], expected_start, "{argv:?}");
    let tail: Vec<_> = argv
        .iter()
        .rev()
        .take(4)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "--pass-down-termination",
            "--gpuset",
            "NONE",
            "credentials=env"
        ],
        "{argv:?}"
    );
    let script = std::fs::read_to_string(format!(
        "{}/slurm/{worker_id}/{worker_id}.slurm",
        scratch.dir.path().display()
    ));
    let script = script.unwrap();
    assert!(
        !script.contains(common::PASSWORD),
        "the password must not be in the saved script"
    );
    scratch.finish(&job);
    let ended = wait_for_state(&backend, &job.id, JobState::Ended).await;
    assert_eq!(ended.name, worker_id);
}

/// A job whose worker exits non-zero is a failed launch (Slurm FAILED / NonZeroExitCode).
#[tokio::test(flavor = "multi_thread")]
async fn failing_worker_is_failed() {
    if !slurm_available() {
        return;
    }
    let _node = NODE.lock().await;
    let scratch = Scratch::new();
    let backend = SlurmBackend::new(&scratch.config(), Some(credentials())).unwrap();
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

/// Without credentials in the environment and without a password file, the script's own
/// check stops the job: a failed launch, as upstream.
#[tokio::test(flavor = "multi_thread")]
async fn missing_credentials_fail_the_job() {
    if !slurm_available() {
        return;
    }
    let _node = NODE.lock().await;
    let scratch = Scratch::new();
    let backend = SlurmBackend::new(&scratch.config(), None).unwrap();
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
    wait_for_state(&backend, &job.id, JobState::Failed).await;
}

/// sbatch refusing a job is a permanent error that carries Slurm's message.
#[tokio::test(flavor = "multi_thread")]
async fn bad_partition_is_a_permanent_error_with_slurms_message() {
    if !slurm_available() {
        return;
    }
    let scratch = Scratch::new();
    let config = SlurmConfig {
        partition: Some("nosuch".into()),
        ..scratch.config()
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
    let config = SlurmConfig {
        cpus: 10_000,
        ..scratch.config()
    };
    let backend = SlurmBackend::new(&config, Some(credentials())).unwrap();
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
        err.to_string()
            .contains("More processors requested than permitted"),
        "{err}"
    );
}

/// Listing costs one squeue call, whatever the number of jobs; dry runs cost none.
#[tokio::test(flavor = "multi_thread")]
async fn one_command_per_listing() {
    if !slurm_available() {
        return;
    }
    let scratch = Scratch::new();
    let backend = SlurmBackend::new(&scratch.config(), Some(credentials())).unwrap();
    let worker = scratch.worker("stand-in");
    for _ in 0..3 {
        backend.get_worker_jobs().await.unwrap();
    }
    let unique = new_unique();
    let job = backend
        .start_worker_job(&LaunchRequest {
            unique: &unique,
            worker: &worker,
            dry_run: true,
        })
        .await
        .unwrap();
    assert_eq!((job.state, backend.calls()), (JobState::Ended, 3));
    assert!(backend.get_worker_jobs().await.unwrap().is_empty());
}

/// The figure for the bench: listing costs one `squeue`, with 1, 100 (and, with
/// `SLURM_TRACKED_JOBS=1,100,500`, 500) tracked jobs. The jobs are submitted held, so they stay
/// pending and use no resources; they are cancelled at the end.
#[tokio::test(flavor = "multi_thread")]
async fn one_squeue_per_tick_whatever_the_number_of_jobs() {
    if !slurm_available() {
        return;
    }
    let _node = NODE.lock().await;
    let scratch = Scratch::new();
    let backend = SlurmBackend::new(&scratch.config(), Some(credentials())).unwrap();
    let prefix = backend.settings().job_name_prefix();
    let counts = std::env::var("SLURM_TRACKED_JOBS").unwrap_or_else(|_| "1,100".into());
    let mut submitted: Vec<String> = Vec::new();
    for target in counts.split(',').map(|n| {
        n.trim()
            .parse::<usize>()
            .expect("SLURM_TRACKED_JOBS: numbers")
    }) {
        while submitted.len() < target {
            let name = format!("{prefix}{:032x}", submitted.len());
            let output = scratch.path("held.out");
            let id = common::run(
                "sbatch",
                &[
                    "--parsable",
                    "--hold",
                    "--mem=16",
                    "-J",
                    &name,
                    "-o",
                    &output,
                    "--wrap",
                    "true",
                ],
            );
            submitted.push(id);
        }
        let before = backend.calls();
        let started = std::time::Instant::now();
        let jobs = backend.get_worker_jobs().await.unwrap();
        let elapsed = started.elapsed();
        assert_eq!(jobs.len(), target, "every tracked job listed");
        assert!(
            jobs.iter().all(|j| j.state == JobState::Pending),
            "held jobs are pending"
        );
        assert_eq!(backend.calls() - before, 1, "one squeue for {target} jobs");
        eprintln!("tracked jobs: {target}, slurm commands per tick: 1, squeue took {elapsed:?}");
    }
    let mut scancel = vec!["scancel"];
    scancel.extend(submitted.iter().map(String::as_str));
    common::run(scancel[0], &scancel[1..]);
}

/// Two deployments (another server, or another CodaLab user) under the same Slurm user, job
/// name and partition, on the real cluster (#28 item 4): each submits with its origin in
/// `--comment` (read back by the one `squeue` call, `%k`) and lists only its own jobs and
/// those without an origin (plain `sbatch`, as upstream's manager submits them).
#[tokio::test(flavor = "multi_thread")]
async fn another_deployments_jobs_are_not_listed_and_unmarked_ones_are() {
    use codalab_wm_core::backend::origin;
    if !slurm_available() {
        return;
    }
    let _node = NODE.lock().await;
    let scratch = Scratch::new();
    let config = scratch.config();
    // Cancels whatever a failed assertion leaves under this job name.
    let _cleanup = SlurmHarness::new(Scratch::new(), config.clone());
    let production = SlurmBackend::new(&config, Some(credentials()))
        .unwrap()
        .with_origin(Some(origin("http://127.0.0.1:1", "codalab-test")));
    let staging = SlurmBackend::new(&config, Some(credentials()))
        .unwrap()
        .with_origin(Some(origin("http://127.0.0.1:2", "codalab-test")));
    let worker = scratch.worker("stand-in");
    let mut ids = Vec::new();
    for backend in [&production, &staging] {
        let unique = new_unique();
        let request = LaunchRequest {
            unique: &unique,
            worker: &worker,
            dry_run: false,
        };
        ids.push(backend.start_worker_job(&request).await.unwrap().id);
    }
    let prefix = production.settings().job_name_prefix();
    let unmarked = common::run(
        "sbatch",
        &[
            "--parsable",
            "--hold",
            "--partition=cpu",
            "--mem=16",
            "-J",
            &format!("{prefix}{}", new_unique()),
            "-o",
            "/dev/null",
            "--wrap",
            "true",
        ],
    );
    let comment = common::run("squeue", &["-h", "-o", "%k", "-j", &ids[0]]);
    let expected = origin("http://127.0.0.1:1", "codalab-test");
    assert_eq!(comment, format!("codalab-wm-origin={expected}"));
    let listed = |jobs: Vec<codalab_wm_core::WorkerJob>| {
        let mut ids: Vec<String> = jobs.into_iter().map(|j| j.id).collect();
        ids.sort();
        ids
    };
    let sorted = |mut v: Vec<&String>| {
        v.sort();
        v.into_iter().cloned().collect::<Vec<String>>()
    };
    let seen = listed(production.get_worker_jobs().await.unwrap());
    assert_eq!(seen, sorted(vec![&ids[0], &unmarked]), "production");
    let seen = listed(staging.get_worker_jobs().await.unwrap());
    assert_eq!(seen, sorted(vec![&ids[1], &unmarked]), "staging");
    let every = SlurmBackend::new(&config, Some(credentials())).unwrap();
    let seen = listed(every.get_worker_jobs().await.unwrap());
    assert_eq!(seen, sorted(vec![&ids[0], &ids[1], &unmarked]), "no origin");
    common::run("scancel", &[&ids[0], &ids[1], &unmarked]);
}
