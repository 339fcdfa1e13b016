//! Table tests of the check-in matching and states.

use super::*;

const U1: &str = "0123456789abcdef0123456789abcdef";
const U2: &str = "fedcba9876543210fedcba9876543210";
const TIMEOUT: Duration = Duration::from_secs(300);

fn worker(id: &str, runs: usize, terminating: bool, checkin_time: f64) -> CheckedInWorker {
    CheckedInWorker {
        worker_id: id.to_owned(),
        run_uuids: (0..runs).map(|i| format!("0xrun{i}")).collect(),
        is_terminating: terminating,
        checkin_time: Some(checkin_time),
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn launch_unique_is_the_trailing_32_lowercase_hex_digits() {
    let cases: &[(&str, Option<&str>)] = &[
        (&format!("host-{U1}"), Some(U1)),
        (
            &format!("node-7.cluster.local-alice-codalab-slurm-worker-cpu-{U1}"),
            Some(U1),
        ),
        // A hostname that itself ends in hex digits is only a prefix.
        (&format!("deadbeef-{U1}"), Some(U1)),
        (&format!("cl-worker-{U1}"), Some(U1)),
        (&format!("cl_worker_{U1}"), Some(U1)),
        (U1, Some(U1)),
        ("dispatch-worker-3", None),
        (&U1.to_uppercase(), None),
        (&U1[1..], None),
        ("", None),
        ("pid 4242", None),
        // Multi-byte characters never split: not a unique, no panic.
        (&format!("é{}", &U1[2..]), None),
    ];
    for (id, want) in cases {
        assert_eq!(launch_unique(id), *want, "{id}");
    }
}

#[test]
fn jobs_match_their_own_check_ins_whatever_the_hostname_prefix() {
    let view = CheckinView::new(vec![
        worker(
            &format!("gpu-node-12.example.org-alice-codalab-slurm-worker-gpu-{U1}"),
            0,
            false,
            0.0,
        ),
        // Another manager's worker, and a worker started by hand.
        worker(&format!("host-{U2}"), 1, false, 0.0),
        worker("dispatch-worker-3", 0, false, 0.0),
    ]);
    assert_eq!(
        view.len(),
        2,
        "the hand-started worker has no launch unique"
    );
    let slurm_name = format!("alice-codalab-slurm-worker-gpu-{U1}");
    // Slurm: the unique ends the job name (its id is a number).
    assert!(view.worker_of("4242", &slurm_name).is_some());
    // Kubernetes / Azure / local: the unique ends the id.
    assert!(view.worker_of(&format!("cl-worker-{U1}"), "pod").is_some());
    assert!(view.worker_of(&format!("cl_worker_{U1}"), "task").is_some());
    // A job of ours whose worker has not checked in: the other manager's worker is not it.
    let other = "00000000000000000000000000000000";
    assert!(
        view.worker_of("4243", &format!("alice-codalab-slurm-worker-gpu-{other}"))
            .is_none()
    );
    assert!(view.worker_of("4244", "no-unique-here").is_none());
}

#[test]
fn states_from_the_platform_and_the_server() {
    use JobState::*;
    let missing = |unseen: u64, was_seen: bool, fresh: bool| JobCheckin::Missing {
        unseen_for: secs(unseen),
        was_seen,
        fresh,
    };
    let checked_in = |runs: usize, terminating: bool| JobCheckin::CheckedIn { runs, terminating };
    let cases: &[(&str, JobState, JobCheckin, Option<WorkerState>)] = &[
        (
            "pending, not listed",
            Pending,
            missing(0, false, true),
            Some(WorkerState::Starting),
        ),
        (
            "running, not yet listed",
            Active,
            missing(10, false, true),
            Some(WorkerState::Starting),
        ),
        (
            "running, exactly at the timeout",
            Active,
            missing(300, false, true),
            Some(WorkerState::Starting),
        ),
        (
            "running, never listed past the timeout",
            Active,
            missing(301, false, true),
            Some(WorkerState::Lost),
        ),
        (
            "listed before, vanished past the timeout",
            Active,
            missing(301, true, true),
            Some(WorkerState::Lost),
        ),
        (
            "stale view: never lost",
            Active,
            missing(10_000, false, false),
            Some(WorkerState::Starting),
        ),
        (
            "pending a long time: the pending timeout's business",
            Pending,
            missing(10_000, false, true),
            Some(WorkerState::Starting),
        ),
        (
            "checked in, idle",
            Active,
            checked_in(0, false),
            Some(WorkerState::ReadyIdle),
        ),
        (
            "checked in, running a bundle",
            Active,
            checked_in(1, false),
            Some(WorkerState::Busy),
        ),
        (
            "checked in, terminating: takes nothing new",
            Active,
            checked_in(0, true),
            Some(WorkerState::Busy),
        ),
        (
            "listed while the platform still says pending",
            Pending,
            checked_in(0, false),
            Some(WorkerState::ReadyIdle),
        ),
        ("no view", Active, JobCheckin::Unknown, None),
        ("failed job", Failed, checked_in(0, false), None),
        ("ended job", Ended, missing(10_000, true, true), None),
    ];
    for (name, state, checkin, want) in cases {
        assert_eq!(worker_state(*state, *checkin, TIMEOUT), *want, "{name}");
    }
}

#[test]
fn job_checkin_measures_on_the_manager_clock_whatever_the_server_clock_says() {
    let name = format!("alice-codalab-slurm-worker-cpu-{U1}");
    // The server's clock is a day ahead or years behind: only presence in the list counts.
    for checkin_time in [1.0e12, 0.0, -5.0] {
        let view = CheckinView::new(vec![worker(&format!("host-{U1}"), 0, false, checkin_time)]);
        let sighting = Some(Sighting {
            view: &view,
            fresh: true,
        });
        let times = JobTimes {
            active_since: Some(secs(0)),
            last_seen: Some(secs(0)),
        };
        let got = job_checkin(
            sighting,
            ("42", &name, JobState::Active),
            times,
            secs(10_000),
        );
        assert_eq!(
            got,
            JobCheckin::CheckedIn {
                runs: 0,
                terminating: false
            },
            "{checkin_time}"
        );
    }
    let empty = CheckinView::default();
    let cases: &[(&str, JobTimes, bool, JobCheckin)] = &[
        (
            "never listed: since it became active",
            JobTimes {
                active_since: Some(secs(100)),
                last_seen: None,
            },
            true,
            JobCheckin::Missing {
                unseen_for: secs(900),
                was_seen: false,
                fresh: true,
            },
        ),
        (
            "vanished: since it was last listed",
            JobTimes {
                active_since: Some(secs(100)),
                last_seen: Some(secs(800)),
            },
            true,
            JobCheckin::Missing {
                unseen_for: secs(200),
                was_seen: true,
                fresh: true,
            },
        ),
        (
            "stale view kept",
            JobTimes {
                active_since: Some(secs(100)),
                last_seen: None,
            },
            false,
            JobCheckin::Missing {
                unseen_for: secs(900),
                was_seen: false,
                fresh: false,
            },
        ),
    ];
    for (what, times, fresh, want) in cases {
        let sighting = Some(Sighting {
            view: &empty,
            fresh: *fresh,
        });
        let got = job_checkin(
            sighting,
            ("42", &name, JobState::Active),
            *times,
            secs(1000),
        );
        assert_eq!(got, *want, "{what}");
    }
    let times = JobTimes {
        active_since: Some(secs(0)),
        last_seen: None,
    };
    let sighting = Some(Sighting {
        view: &empty,
        fresh: true,
    });
    assert_eq!(
        job_checkin(None, ("42", &name, JobState::Active), times, secs(1000)),
        JobCheckin::Unknown,
        "no view yet"
    );
    assert_eq!(
        job_checkin(
            sighting,
            ("42", "pid 42", JobState::Active),
            times,
            secs(1000)
        ),
        JobCheckin::Unknown,
        "a job whose check-in cannot be matched is never lost"
    );
}

#[test]
fn a_failed_call_keeps_the_last_view_and_never_makes_a_lost_verdict() {
    // Property over many clocks: whatever the times, a stale view gives no `Lost`.
    let name = format!("w-{U1}");
    let empty = CheckinView::default();
    for now in (0..100_000).step_by(997) {
        for last_seen in [None, Some(secs(0)), Some(secs(now / 2))] {
            let times = JobTimes {
                active_since: Some(secs(0)),
                last_seen,
            };
            let sighting = Some(Sighting {
                view: &empty,
                fresh: false,
            });
            let checkin = job_checkin(sighting, ("1", &name, JobState::Active), times, secs(now));
            assert_ne!(
                worker_state(JobState::Active, checkin, TIMEOUT),
                Some(WorkerState::Lost)
            );
        }
    }
}

#[test]
fn the_server_reply_parses_from_the_real_sample() {
    // samples/workers-info.json of a real CodaLab 1.7.5 server (REPORT.md §6), trimmed.
    let body = r#"[{"user_id": "0", "worker_id": "dispatch-worker-3", "tag": "dispatchq3", "cpus": 2,
        "checkin_time": 1795295461, "run_uuids": ["0xe5a98b06fdc7463faf560b56bf7783c3"],
        "is_terminating": false, "cpus_in_use": 1}]"#;
    let workers: Vec<CheckedInWorker> = serde_json::from_str(body).unwrap();
    assert_eq!(workers[0].worker_id, "dispatch-worker-3");
    assert_eq!(workers[0].run_uuids.len(), 1);
    assert_eq!(workers[0].checkin_time, Some(1_795_295_461.0));
}
