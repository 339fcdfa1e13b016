//! What one reconcile sees of a pool, from its pods and its status (the state is in the API
//! server: a new leader needs nothing from the old one). Pure: the wall clock comes in as
//! `now`, and core's "manager clock" is the time since the Unix epoch.
//!
//! - pending for: since the pod's creation; active for: since this process first saw the pod
//!   running ([`crate::memory`]);
//! - check-ins: the server's list, judged as core's manager judges them, with what is
//!   remembered across reconciles ([`Checkins`]);
//! - the last launch: the newest pod's creation;
//! - pods being deleted count toward `max` (`stopping`);
//! - the failure streak ([`PoolHealth`]): the one recorded in the pool's status (launches the
//!   API refused, pods deleted for pending too long, lost workers), plus each failed pod newer
//!   than its last failure; a pod that runs and is newer than the last failure ends it. The
//!   status and the pods live in the API server, so the backoff survives a change of leader.

use crate::crd::FailureStreak;
use crate::memory::Remembered;
use codalab_wm_core::backend::{JobState, WorkerJob};
use codalab_wm_core::checkin::{CheckinView, JobCheckin, JobTimes, Sighting, job_checkin};
use codalab_wm_core::pools::{Failure, ObservedJob, PoolHealth, PoolObservation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// The reason the backend gives a pod that is being deleted.
const TERMINATING: &str = "Terminating";

/// `time` on core's clock (since the epoch).
pub fn clock(time: SystemTime) -> Duration {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

/// What a reconcile knows of the pool's check-ins: the server's worker list (when it was
/// read) with when the current run of successful reads began, and what is remembered of
/// earlier reconciles ([`crate::memory`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Checkins<'a> {
    /// This reconcile's worker list and the start of the run of fresh reads it belongs to.
    pub view: Option<(&'a CheckinView, Duration)>,
    /// Pods whose worker checked in, and whether any worker of the pool ever did.
    pub remembered: Option<&'a Remembered>,
    /// When each running pod was first seen running (this process's clock).
    pub running_since: Option<&'a HashMap<String, Duration>>,
}

/// The pool's observation from its `jobs` (its pods as the backend reads them) and what is
/// known of their check-ins.
pub fn pool_observation(
    jobs: &[WorkerJob],
    recorded: Option<&FailureStreak>,
    checkins: Checkins<'_>,
    now: SystemTime,
) -> PoolObservation {
    let now_clock = clock(now);
    let since = |job: &WorkerJob| {
        job.submitted_at
            .and_then(|t| now.duration_since(t).ok())
            .unwrap_or_default()
    };
    let sighting = checkins.view.map(|(view, fresh_since)| Sighting {
        view,
        fresh: true,
        fresh_since,
    });
    let remembered = checkins.remembered.cloned().unwrap_or_default();
    let live = jobs
        .iter()
        .filter(|j| j.reason.as_deref() != Some(TERMINATING));
    let observed = live
        .map(|job| {
            // Running since this process first saw it run (never the pod's creation: a pod
            // that pended for minutes has just started); unknown: just now.
            let running_since = checkins
                .running_since
                .and_then(|m| m.get(&job.id).copied())
                .unwrap_or(now_clock);
            let (pending_for, active_for) = match job.state {
                JobState::Pending => (since(job), Duration::ZERO),
                JobState::Active => (Duration::ZERO, now_clock.saturating_sub(running_since)),
                _ => (Duration::ZERO, Duration::ZERO),
            };
            let times = JobTimes {
                active_since: Some(running_since),
                last_seen: None,
                checked_in: remembered.checked_in.contains(&job.id),
            };
            ObservedJob {
                checkin: job_checkin(sighting, (&job.id, &job.name, job.state), times, now_clock),
                // What the pod's reason says: an image that cannot be had, a node that will
                // not come (the backend's reading, as the CLI's manager has it).
                pending: codalab_wm_k8s::pods::pending_kind(job.reason.as_deref()),
                // Listed by the pool's own label: pods this operator created for the pool.
                ..ObservedJob::new(job.id.clone(), job.state, pending_for, active_for)
                    .launched_here()
            }
        })
        .collect::<Vec<_>>();
    let seen_now = observed
        .iter()
        .any(|j| matches!(j.checkin, JobCheckin::CheckedIn { .. }));
    let newest = jobs.iter().filter_map(|j| j.submitted_at).max();
    PoolObservation {
        jobs: observed,
        stopping: jobs
            .iter()
            .filter(|j| j.reason.as_deref() == Some(TERMINATING))
            .count(),
        since_last_launch: newest.and_then(|t| now.duration_since(t).ok()),
        health: health(recorded, jobs, now_clock),
        unobserved: None,
        // Budgets are the manager's (`max_worker_hours_per_day` …); a pool resource has none.
        budget_reached: None,
        budget_room: None,
        checkins_seen: remembered.workers_seen || seen_now,
        // A fallback is between a manager's pools; a pool resource stands alone.
        capacity: Default::default(),
        // The operator keeps no memory of a surplus between reconciles: it withdraws nothing.
        surplus_for: None,
        // A pool resource stands alone: nothing is hedged on it.
        hedge_room: 0,
    }
}

/// The failure streak: the `recorded` one, then the pods' news since its last failure.
pub fn health(recorded: Option<&FailureStreak>, jobs: &[WorkerJob], now: Duration) -> PoolHealth {
    let mut health = recorded.map(from_streak).unwrap_or_default();
    let since = health.last_failure;
    let mut news: Vec<(Duration, bool)> = jobs
        .iter()
        .filter_map(|j| Some((j.submitted_at.map(clock)?, j.state)))
        .filter(|(t, _)| since.is_none_or(|s| *t > s))
        .filter_map(|(t, state)| match state {
            JobState::Failed => Some((t, true)),
            JobState::Active | JobState::Ended => Some((t, false)),
            _ => None,
        })
        .collect();
    news.sort();
    for (at, failed) in news {
        if failed {
            // The operator keeps a streak in its status, not the errors: it backs off, and
            // suspends no pool for misconfiguration (the manager does).
            health.record_failure(at, Failure::TRANSIENT);
        } else {
            health.record_success();
        }
    }
    health.expire(now);
    health
}

/// The streak as the status keeps it (`None` when there is none).
pub fn to_streak(health: &PoolHealth) -> Option<FailureStreak> {
    let time = |d: Duration| {
        Time(Timestamp::new(d.as_secs() as i64, d.subsec_nanos() as i32).unwrap_or_default())
    };
    Some(FailureStreak {
        count: health.failures,
        last_failure: time(health.last_failure?),
        backoff_until: time(health.backoff_until?),
    })
    .filter(|s| s.count > 0)
}

fn from_streak(streak: &FailureStreak) -> PoolHealth {
    let clock = |t: &Time| {
        Duration::try_from(t.0.duration_since(Timestamp::UNIX_EPOCH)).unwrap_or_default()
    };
    PoolHealth {
        failures: streak.count,
        last_failure: Some(clock(&streak.last_failure)),
        backoff_until: Some(clock(&streak.backoff_until)),
        ..PoolHealth::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_core::checkin::{CheckedInWorker, WorkerState, worker_state};

    const T0: u64 = 1_800_000_000;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + seconds)
    }

    fn job(id: &str, state: JobState, created: u64) -> WorkerJob {
        let mut job = WorkerJob::new(id, state);
        job.name = id.to_owned();
        job.submitted_at = Some(at(created));
        job
    }

    #[test]
    fn times_come_from_the_pods() {
        let mut terminating = job("c", JobState::Ended, 50);
        terminating.reason = Some(TERMINATING.into());
        let jobs = [
            job("a", JobState::Pending, 10),
            job("b", JobState::Active, 40),
            terminating,
        ];
        let running = HashMap::from([("b".to_owned(), clock(at(40)))]);
        let checkins = Checkins {
            running_since: Some(&running),
            ..Checkins::default()
        };
        let observed = pool_observation(&jobs, None, checkins, at(100));
        assert_eq!(observed.jobs.len(), 2);
        assert_eq!(observed.jobs[0].pending_for, Duration::from_secs(90));
        assert_eq!(observed.jobs[1].active_for, Duration::from_secs(60));
        assert_eq!(observed.stopping, 1);
        assert_eq!(observed.since_last_launch, Some(Duration::from_secs(50)));
        assert!(observed.unobserved.is_none());
    }

    /// #42 item 4: a pod whose image is not there is one the pool's plan stops at once (a
    /// `blocked` reason, whatever `pending_timeout`), as the CLI's manager does.
    #[test]
    fn a_pod_whose_image_is_missing_is_blocked() {
        use codalab_wm_core::PendingKind;
        let mut missing = job("a", JobState::Pending, 10);
        missing.reason = Some("ErrImagePull: docker.io/codalab/worker:nosuch: not found".into());
        let queued = job("b", JobState::Pending, 10);
        let observed = pool_observation(&[missing, queued], None, Checkins::default(), at(30));
        let kinds: Vec<_> = observed.jobs.iter().map(|j| j.pending).collect();
        assert_eq!(kinds, [PendingKind::Misconfigured, PendingKind::Queued]);
    }

    #[test]
    fn check_ins_come_from_the_servers_list() {
        let unique = "ab".repeat(16);
        let id = format!("cl-worker-{unique}");
        let view = CheckinView::new(vec![CheckedInWorker {
            worker_id: id.clone(),
            run_uuids: vec!["r1".into()],
            ..CheckedInWorker::default()
        }]);
        let observed = pool_observation(
            &[job(&id, JobState::Active, 0)],
            None,
            listed(&view, 0),
            at(60),
        );
        assert!(
            matches!(
                observed.jobs[0].checkin,
                codalab_wm_core::checkin::JobCheckin::CheckedIn { runs: 1, .. }
            ),
            "{:?}",
            observed.jobs[0].checkin
        );
    }

    fn listed(view: &CheckinView, fresh_since: u64) -> Checkins<'_> {
        Checkins {
            view: Some((view, clock(at(fresh_since)))),
            ..Checkins::default()
        }
    }

    fn state(observed: &PoolObservation) -> Option<WorkerState> {
        let job = &observed.jobs[0];
        worker_state(job.state, job.checkin, Duration::from_secs(300))
    }

    /// The review's case (1.5): a pod created long ago that has just started running, or one
    /// running for an hour that the operator just began to watch, is not lost on one list
    /// that lacks it.
    #[test]
    fn a_pod_that_pended_long_or_ran_long_is_not_lost_on_one_list() {
        let id = format!("cl-worker-{}", "ab".repeat(16));
        let none = CheckinView::default();
        for now in [400, 3600] {
            let o = pool_observation(
                &[job(&id, JobState::Active, 0)],
                None,
                // Every read since the pod's creation succeeded and listed nothing.
                listed(&none, 0),
                at(now),
            );
            assert_ne!(state(&o), Some(WorkerState::Lost), "at {now}");
        }
    }

    /// Lost only when it never checked in, ran for longer than the timeout and every read
    /// over that time succeeded; a pod remembered as checked in is vanished, never lost.
    #[test]
    fn lost_needs_running_unseen_over_fresh_reads_and_no_check_in_ever() {
        let id = format!("cl-worker-{}", "cd".repeat(16));
        let none = CheckinView::default();
        let jobs = [job(&id, JobState::Active, 0)];
        // (running since, fresh since, remembered checked in) → lost at 1000
        let cases = [
            (100, 100, false, Some(WorkerState::Lost)),
            (800, 100, false, Some(WorkerState::Starting)),
            (100, 800, false, Some(WorkerState::Starting)),
            (100, 100, true, Some(WorkerState::Vanished)),
        ];
        for (running, fresh, checked_in, expected) in cases {
            let running_since = HashMap::from([(id.clone(), clock(at(running)))]);
            let remembered = Remembered {
                checked_in: if checked_in {
                    [id.clone()].into()
                } else {
                    Default::default()
                },
                workers_seen: true,
            };
            let checkins = Checkins {
                remembered: Some(&remembered),
                running_since: Some(&running_since),
                ..listed(&none, fresh)
            };
            let o = pool_observation(&jobs, None, checkins, at(1000));
            assert_eq!(state(&o), expected, "{running} {fresh} {checked_in}");
            assert!(o.checkins_seen);
        }
        let unread = Checkins {
            view: None,
            ..Checkins::default()
        };
        let o = pool_observation(&jobs, None, unread, at(1000));
        assert_eq!(state(&o), None, "no list read: nothing known");
    }

    #[test]
    fn the_failure_streak_counts_failures_since_the_last_pod_that_ran() {
        let cases: [(&[(JobState, u64)], u32); 5] = [
            (&[], 0),
            (&[(JobState::Failed, 10), (JobState::Failed, 20)], 2),
            (
                &[
                    (JobState::Failed, 10),
                    (JobState::Active, 20),
                    (JobState::Failed, 30),
                ],
                1,
            ),
            (&[(JobState::Failed, 10), (JobState::Active, 20)], 0),
            (&[(JobState::Failed, 10), (JobState::Pending, 20)], 1),
        ];
        for (pods, failures) in cases {
            let jobs: Vec<WorkerJob> = pods
                .iter()
                .enumerate()
                .map(|(i, (state, t))| job(&format!("p{i}"), *state, *t))
                .collect();
            let health = health(None, &jobs, clock(at(40)));
            assert_eq!(health.failures, failures, "{pods:?}");
            assert_eq!(health.backoff_until.is_some(), failures > 0, "{pods:?}");
        }
    }

    #[test]
    fn the_recorded_streak_goes_on_until_a_newer_pod_runs() {
        let mut recorded = PoolHealth::default();
        recorded.record_failure(clock(at(100)), Failure::TRANSIENT);
        let streak = to_streak(&recorded).unwrap();
        assert_eq!(from_streak(&streak), recorded, "the status keeps it whole");
        let old_pods = [job("old", JobState::Active, 50)];
        assert_eq!(health(Some(&streak), &old_pods, clock(at(110))).failures, 1);
        let failed_since = [job("f", JobState::Failed, 105)];
        assert_eq!(
            health(Some(&streak), &failed_since, clock(at(110))).failures,
            2
        );
        let ran_since = [job("r", JobState::Active, 105)];
        assert_eq!(
            health(Some(&streak), &ran_since, clock(at(110))).failures,
            0
        );
        assert!(to_streak(&PoolHealth::default()).is_none());
    }
}
