//! One pool's counts before assignment ([`Census`]): active, starting (free capacity),
//! pending, stuck and lost jobs, jobs toward `max`, and whether the pool backs off. Pure.

use super::{LaunchMode, ObservedJob, PoolObservation, PoolPolicy};
use crate::backend::JobState;
use crate::checkin::{JobCheckin, WorkerState, worker_state};
use crate::policy::Reason;
use std::time::Duration;

/// Counts of one pool before assignment.
#[derive(Debug, Clone)]
pub(super) struct Census {
    pub(super) active: usize,
    /// Active and free: checked in and idle, not yet checked in, or (no check-in
    /// information) active for less than `startup_grace`.
    pub(super) starting: usize,
    /// Pending and not stuck.
    pub(super) pending: usize,
    pub(super) stuck: Vec<Reason>,
    pub(super) stuck_ids: Vec<String>,
    /// Running jobs whose worker never checked in or vanished (target mode): stopped.
    pub(super) lost: Vec<Reason>,
    pub(super) lost_ids: Vec<String>,
    /// Every job that counts toward `max`: active, pending, stuck and stopping.
    pub(super) jobs: usize,
    pub(super) backing_off: Option<Reason>,
}

impl Census {
    /// Notes a lost job: stopped this tick, counted toward `max` until gone.
    fn lose(&mut self, job: &ObservedJob, timeout: Duration) {
        let (unseen_for, was_seen) = match job.checkin {
            JobCheckin::Missing {
                unseen_for,
                was_seen,
                ..
            } => (unseen_for, was_seen),
            _ => (Duration::ZERO, false),
        };
        self.lost_ids.push(job.id.clone());
        self.lost.push(Reason::WorkerLost {
            job_id: job.id.clone(),
            unseen_seconds: unseen_for.as_secs(),
            timeout_seconds: timeout.as_secs(),
            was_seen,
        });
    }
}

pub(super) fn census(policy: &PoolPolicy, observed: &PoolObservation, now: Duration) -> Census {
    let target = policy.launch_mode == LaunchMode::Target;
    let mut census = Census {
        active: 0,
        starting: 0,
        pending: 0,
        stuck: Vec::new(),
        stuck_ids: Vec::new(),
        lost: Vec::new(),
        lost_ids: Vec::new(),
        jobs: observed.stopping,
        backing_off: None,
    };
    for job in &observed.jobs {
        match job.state {
            JobState::Active => {
                match worker_state(job.state, job.checkin, policy.checkin_timeout) {
                    Some(WorkerState::Lost) if target => census.lose(job, policy.checkin_timeout),
                    Some(WorkerState::Busy) => census.active += 1,
                    // Checked in and idle, or not yet checked in: free capacity.
                    Some(_) => {
                        census.active += 1;
                        census.starting += usize::from(target);
                    }
                    // No check-in information: presumed busy after the startup grace.
                    None => {
                        census.active += 1;
                        if target && job.active_for < policy.startup_grace {
                            census.starting += 1;
                        }
                    }
                }
            }
            JobState::Pending => match policy.pending_timeout.filter(|_| target) {
                Some(timeout) if job.pending_for >= timeout => {
                    census.stuck_ids.push(job.id.clone());
                    census.stuck.push(Reason::PendingTimeout {
                        job_id: job.id.clone(),
                        pending_seconds: job.pending_for.as_secs(),
                        timeout_seconds: timeout.as_secs(),
                    });
                }
                _ => census.pending += 1,
            },
            JobState::Failed | JobState::Preempted | JobState::Ended => continue,
        }
        census.jobs += 1;
    }
    if target && let Some(until) = observed.health.backing_off(now) {
        census.backing_off = Some(Reason::BackingOff {
            until_seconds: until.as_secs(),
            remaining_seconds: until.saturating_sub(now).as_secs(),
            failures: observed.health.failures,
        });
    }
    census
}
