//! What one reconcile sees of a pool, from its pods alone (the pods are the state: a new
//! leader needs nothing from the old one). Pure: the wall clock comes in as `now`, and core's
//! "manager clock" is the time since the Unix epoch.
//!
//! - pending / active for: since the pod's creation;
//! - the last launch: the newest pod's creation;
//! - pods being deleted count toward `max` (`stopping`);
//! - the failure streak ([`PoolHealth`]): the failed pods since the newest pod that did not
//!   fail, each a failure at its creation, so the backoff survives a change of leader.

use codalab_wm_core::backend::{JobState, WorkerJob};
use codalab_wm_core::checkin::{CheckinView, JobTimes, Sighting, job_checkin};
use codalab_wm_core::pools::{ObservedJob, PoolHealth, PoolObservation};
use std::time::{Duration, SystemTime};

/// The reason the backend gives a pod that is being deleted.
const TERMINATING: &str = "Terminating";

/// `time` on core's clock (since the epoch).
pub fn clock(time: SystemTime) -> Duration {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

/// The pool's observation from its `jobs` (its pods as the backend reads them) and the
/// server's worker list, if it was read.
pub fn pool_observation(
    jobs: &[WorkerJob],
    checkins: Option<&CheckinView>,
    now: SystemTime,
) -> PoolObservation {
    let now_clock = clock(now);
    let since = |job: &WorkerJob| {
        job.submitted_at
            .and_then(|t| now.duration_since(t).ok())
            .unwrap_or_default()
    };
    let sighting = checkins.map(|view| Sighting { view, fresh: true });
    let live = jobs
        .iter()
        .filter(|j| j.reason.as_deref() != Some(TERMINATING));
    let observed = live
        .map(|job| {
            let (pending_for, active_for) = match job.state {
                JobState::Pending => (since(job), Duration::ZERO),
                JobState::Active => (Duration::ZERO, since(job)),
                _ => (Duration::ZERO, Duration::ZERO),
            };
            let times = JobTimes {
                active_since: job.submitted_at.map(clock),
                last_seen: None,
            };
            ObservedJob {
                checkin: job_checkin(sighting, (&job.id, &job.name, job.state), times, now_clock),
                ..ObservedJob::new(job.id.clone(), job.state, pending_for, active_for)
            }
        })
        .collect();
    let newest = jobs.iter().filter_map(|j| j.submitted_at).max();
    PoolObservation {
        jobs: observed,
        stopping: jobs
            .iter()
            .filter(|j| j.reason.as_deref() == Some(TERMINATING))
            .count(),
        since_last_launch: newest.and_then(|t| now.duration_since(t).ok()),
        health: health(jobs, now_clock),
        unobserved: None,
    }
}

/// The failure streak the pods show: failed pods newer than every pod that did not fail.
pub fn health(jobs: &[WorkerJob], now: Duration) -> PoolHealth {
    let last_success = jobs
        .iter()
        .filter(|j| !matches!(j.state, JobState::Failed))
        .filter(|j| j.state != JobState::Pending)
        .filter_map(|j| j.submitted_at.map(clock))
        .max();
    let mut failures: Vec<Duration> = jobs
        .iter()
        .filter(|j| j.state == JobState::Failed)
        .filter_map(|j| j.submitted_at.map(clock))
        .filter(|t| last_success.is_none_or(|s| *t > s))
        .collect();
    failures.sort();
    let mut health = PoolHealth::default();
    for at in failures {
        health.record_failure(at);
    }
    health.expire(now);
    health
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_core::checkin::CheckedInWorker;

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
        let observed = pool_observation(&jobs, None, at(100));
        assert_eq!(observed.jobs.len(), 2);
        assert_eq!(observed.jobs[0].pending_for, Duration::from_secs(90));
        assert_eq!(observed.jobs[1].active_for, Duration::from_secs(60));
        assert_eq!(observed.stopping, 1);
        assert_eq!(observed.since_last_launch, Some(Duration::from_secs(50)));
        assert!(observed.unobserved.is_none());
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
        let observed = pool_observation(&[job(&id, JobState::Active, 0)], Some(&view), at(60));
        assert!(
            matches!(
                observed.jobs[0].checkin,
                codalab_wm_core::checkin::JobCheckin::CheckedIn { runs: 1, .. }
            ),
            "{:?}",
            observed.jobs[0].checkin
        );
    }

    #[test]
    fn the_failure_streak_counts_failures_since_the_last_pod_that_ran() {
        let cases: [(&[(JobState, u64)], u32); 4] = [
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
        ];
        for (pods, failures) in cases {
            let jobs: Vec<WorkerJob> = pods
                .iter()
                .enumerate()
                .map(|(i, (state, t))| job(&format!("p{i}"), *state, *t))
                .collect();
            let health = health(&jobs, clock(at(40)));
            assert_eq!(health.failures, failures, "{pods:?}");
            assert_eq!(health.backoff_until.is_some(), failures > 0, "{pods:?}");
        }
    }
}
