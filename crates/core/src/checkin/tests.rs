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
        ..CheckedInWorker::default()
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
    let not_yet = |unseen: u64| JobCheckin::NotYet {
        unseen_for: secs(unseen),
    };
    let vanished = |unseen: u64| JobCheckin::Vanished {
        unseen_for: secs(unseen),
    };
    let checked_in = |runs: usize, terminating: bool| JobCheckin::CheckedIn { runs, terminating };
    let cases: &[(&str, JobState, JobCheckin, Option<WorkerState>)] = &[
        (
            "pending, not listed",
            Pending,
            not_yet(0),
            Some(WorkerState::Starting),
        ),
        (
            "running, not yet listed",
            Active,
            not_yet(10),
            Some(WorkerState::Starting),
        ),
        (
            "running, exactly at the timeout",
            Active,
            not_yet(300),
            Some(WorkerState::Starting),
        ),
        (
            "running, never listed past the timeout",
            Active,
            not_yet(301),
            Some(WorkerState::Lost),
        ),
        (
            "listed before, vanished past the timeout: never lost",
            Active,
            vanished(301),
            Some(WorkerState::Vanished),
        ),
        (
            "listed before, vanished for a day: never lost",
            Active,
            vanished(86_400),
            Some(WorkerState::Vanished),
        ),
        (
            "pending a long time: the pending timeout's business",
            Pending,
            not_yet(10_000),
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
        ("ended job", Ended, vanished(10_000), None),
    ];
    for (name, state, checkin, want) in cases {
        assert_eq!(worker_state(*state, *checkin, TIMEOUT), *want, "{name}");
    }
}

fn sighting(view: &CheckinView, fresh: bool, fresh_since: u64) -> Option<Sighting<'_>> {
    Some(Sighting {
        view,
        fresh,
        fresh_since: secs(fresh_since),
    })
}

fn times(active_since: u64, last_seen: Option<u64>, checked_in: bool) -> JobTimes {
    JobTimes {
        active_since: Some(secs(active_since)),
        last_seen: last_seen.map(secs),
        checked_in,
    }
}

#[test]
fn job_checkin_measures_on_the_manager_clock_whatever_the_server_clock_says() {
    let name = format!("alice-codalab-slurm-worker-cpu-{U1}");
    // The server's clock is a day ahead or years behind: only presence in the list counts.
    for checkin_time in [1.0e12, 0.0, -5.0] {
        let view = CheckinView::new(vec![worker(&format!("host-{U1}"), 0, false, checkin_time)]);
        let got = job_checkin(
            sighting(&view, true, 0),
            ("42", &name, JobState::Active),
            times(0, Some(0), false),
            secs(10_000),
        );
        let idle = JobCheckin::CheckedIn {
            runs: 0,
            terminating: false,
        };
        assert_eq!(got, idle, "{checkin_time}");
    }
}

#[test]
fn unseen_time_counts_only_over_fresh_views_and_a_check_in_is_never_forgotten() {
    let name = format!("alice-codalab-slurm-worker-cpu-{U1}");
    let empty = CheckinView::default();
    let not_yet = |s| JobCheckin::NotYet {
        unseen_for: secs(s),
    };
    let vanished = |s| JobCheckin::Vanished {
        unseen_for: secs(s),
    };
    // (what, times, fresh, fresh since, want) at 1000 s.
    let cases: &[(&str, JobTimes, bool, u64, JobCheckin)] = &[
        (
            "never listed: since it became active",
            times(100, None, false),
            true,
            0,
            not_yet(900),
        ),
        (
            "listed in this process, then not",
            times(100, Some(800), false),
            true,
            0,
            vanished(200),
        ),
        (
            "checked in before a restart",
            times(100, None, true),
            true,
            0,
            vanished(900),
        ),
        (
            "views fresh again since 950 s: the clock starts again",
            times(100, None, false),
            true,
            950,
            not_yet(50),
        ),
        (
            "stale view that does not list it: unknown",
            times(100, None, false),
            false,
            0,
            JobCheckin::Unknown,
        ),
        (
            "stale view, checked in before: still vanished",
            times(100, Some(10), true),
            false,
            0,
            vanished(900),
        ),
    ];
    for (what, times, fresh, since, want) in cases {
        let got = job_checkin(
            sighting(&empty, *fresh, *since),
            ("42", &name, JobState::Active),
            *times,
            secs(1000),
        );
        assert_eq!(got, *want, "{what}");
    }
    let t = times(0, None, false);
    assert_eq!(
        job_checkin(None, ("42", &name, JobState::Active), t, secs(1000)),
        JobCheckin::Unknown,
        "no view yet"
    );
    assert_eq!(
        job_checkin(
            sighting(&empty, true, 0),
            ("42", "pid 42", JobState::Active),
            t,
            secs(1000)
        ),
        JobCheckin::Unknown,
        "a job whose check-in cannot be matched is never lost"
    );
    let listed = CheckinView::new(vec![worker(&format!("host-{U1}"), 1, false, 0.0)]);
    assert_eq!(
        job_checkin(
            sighting(&listed, false, 0),
            ("42", &name, JobState::Active),
            t,
            secs(1000)
        ),
        JobCheckin::CheckedIn {
            runs: 1,
            terminating: false
        },
        "a stale view that lists the worker says what it last did"
    );
}

#[test]
fn no_view_stale_or_fresh_ever_makes_a_worker_that_checked_in_lost() {
    // Property over many clocks: a stale view gives no `Lost`, and neither does any view of a
    // worker that checked in once.
    let name = format!("w-{U1}");
    let empty = CheckinView::default();
    for now in (0..100_000).step_by(997) {
        for (last_seen, checked_in, fresh) in [
            (None, false, false),
            (Some(0), false, false),
            (Some(now / 2), false, false),
            (Some(0), false, true),
            (Some(now / 2), true, true),
            (None, true, true),
        ] {
            let got = job_checkin(
                sighting(&empty, fresh, 0),
                ("1", &name, JobState::Active),
                times(0, last_seen, checked_in),
                secs(now),
            );
            assert_ne!(
                worker_state(JobState::Active, got, TIMEOUT),
                Some(WorkerState::Lost),
                "{now} {last_seen:?} {checked_in} {fresh}"
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
