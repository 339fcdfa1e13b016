//! One pool's counts before assignment ([`Census`]): active, starting (free capacity),
//! pending, stuck and lost jobs, jobs toward `max`, and whether the pool backs off. Pure.

use super::{LaunchMode, ObservedJob, PoolObservation, PoolPolicy};
use crate::backend::{JobState, PendingKind};
use crate::checkin::{JobCheckin, WorkerState, worker_state};
use crate::policy::{NotStoppedWhy, Reason};
use std::time::Duration;

/// Counts of one pool before assignment.
#[derive(Debug, Clone)]
pub(super) struct Census {
    pub(super) active: usize,
    /// Active and free: checked in and idle, not yet checked in, or (no check-in
    /// information) active for less than `startup_grace`.
    pub(super) starting: usize,
    /// Of `starting`, those checked in and idle: with the server's view
    /// ([`super::ServerView`]) the dispatch model gives them bundles as checked-in workers,
    /// so the pool's packing counts them as busy, not as starting.
    pub(super) ready_idle: usize,
    /// Pending and not stuck, not on hold.
    pub(super) pending: usize,
    /// Pending, not stuck, and held by the platform by itself ([`ObservedJob::on_hold`]):
    /// toward `max`, but no free capacity.
    pub(super) on_hold: usize,
    pub(super) stuck: Vec<Reason>,
    pub(super) stuck_ids: Vec<String>,
    /// Running jobs whose worker never checked in (target mode): stopped.
    pub(super) lost: Vec<Reason>,
    pub(super) lost_ids: Vec<String>,
    /// Jobs a rule would stop but the manager may not ([`Reason::NotStopped`]).
    pub(super) kept: Vec<Reason>,
    /// Of `pending`, the jobs the plan may withdraw when it no longer needs them: launched
    /// here, never checked in (a requeued job that ran is not), not on hold; with how long
    /// each has been pending.
    pub(super) withdrawable: Vec<(Duration, String)>,
    /// Every job that counts toward `max`: active, pending, stuck and stopping.
    pub(super) jobs: usize,
    /// Why the pool launches nothing after failures: suspended, or backing off.
    pub(super) backing_off: Option<Reason>,
}

impl Census {
    /// Jobs that are free capacity: pending and starting; with the server's side (`packs`)
    /// without the checked-in idle ones, which the dispatch model fills as checked-in workers.
    pub(super) fn free(&self, packs: bool) -> usize {
        let ready_idle = if packs { self.ready_idle } else { 0 };
        self.pending + self.starting - ready_idle
    }

    /// Active jobs that are not free capacity (see [`Census::free`]).
    pub(super) fn busy(&self, packs: bool) -> usize {
        let ready_idle = if packs { self.ready_idle } else { 0 };
        self.active - self.starting + ready_idle
    }

    /// Notes a lost job: stopped this tick, counted toward `max` until gone.
    fn lose(&mut self, job: &ObservedJob, unseen_for: Duration, timeout: Duration) {
        self.lost_ids.push(job.id.clone());
        self.lost.push(Reason::WorkerLost {
            job_id: job.id.clone(),
            unseen_seconds: unseen_for.as_secs(),
            timeout_seconds: timeout.as_secs(),
        });
    }

    /// Notes a job a rule would stop but the manager may not: kept, counted toward `max`.
    fn keep(
        &mut self,
        job: &ObservedJob,
        rule: &'static str,
        (seconds, timeout): (Duration, Duration),
        why: NotStoppedWhy,
    ) {
        self.kept.push(Reason::NotStopped {
            job_id: job.id.clone(),
            rule,
            seconds: seconds.as_secs(),
            timeout_seconds: timeout.as_secs(),
            why,
        });
    }
}

/// Why a rule may not stop `job`, if it may not: the manager stops only jobs it launched
/// whose worker never checked in, and a lost one only once the pool's check-ins are visible.
fn may_not_stop(job: &ObservedJob, lost: bool, checkins_seen: bool) -> Option<NotStoppedWhy> {
    if !job.launched_here {
        return Some(NotStoppedWhy::NotLaunchedHere);
    }
    (lost && !checkins_seen).then_some(NotStoppedWhy::NoCheckinSeen)
}

/// Whether the job's worker is known to have checked in (now or before): never stopped.
fn ever_checked_in(job: &ObservedJob) -> bool {
    matches!(
        job.checkin,
        JobCheckin::CheckedIn { .. } | JobCheckin::Vanished { .. }
    )
}

pub(super) fn census(policy: &PoolPolicy, observed: &PoolObservation, now: Duration) -> Census {
    let target = policy.launch_mode == LaunchMode::Target;
    let mut census = Census {
        active: 0,
        starting: 0,
        ready_idle: 0,
        pending: 0,
        on_hold: 0,
        stuck: Vec::new(),
        stuck_ids: Vec::new(),
        lost: Vec::new(),
        lost_ids: Vec::new(),
        kept: Vec::new(),
        withdrawable: Vec::new(),
        jobs: observed.stopping,
        backing_off: None,
    };
    for job in &observed.jobs {
        match job.state {
            JobState::Active => census.active_job(policy, observed, job, target),
            JobState::Pending => census.pending_job(policy, job, target),
            JobState::Failed | JobState::Preempted | JobState::Ended => continue,
        }
        census.jobs += 1;
    }
    if target && observed.health.suspended {
        census.backing_off = Some(Reason::Suspended {
            failures: observed.health.misconfigured,
        });
    } else if target && let Some(until) = observed.health.backing_off(now) {
        census.backing_off = Some(Reason::BackingOff {
            until_seconds: until.as_secs(),
            remaining_seconds: until.saturating_sub(now).as_secs(),
            failures: observed.health.failures,
        });
    }
    census
}

impl Census {
    fn active_job(
        &mut self,
        policy: &PoolPolicy,
        observed: &PoolObservation,
        job: &ObservedJob,
        target: bool,
    ) {
        let timeout = policy.checkin_timeout;
        let state = worker_state(job.state, job.checkin, timeout);
        if let (true, Some(WorkerState::Lost), JobCheckin::NotYet { unseen_for }) =
            (target, state, job.checkin)
        {
            match may_not_stop(job, true, observed.checkins_seen) {
                // Stopped this tick: counts toward `max` until gone, not as capacity.
                None => return self.lose(job, unseen_for, timeout),
                Some(why) => self.keep(job, "worker_lost", (unseen_for, timeout), why),
            }
        }
        self.active += 1;
        match state {
            // Busy, vanished (presumed busy: it may come back), or lost and kept.
            Some(WorkerState::Busy | WorkerState::Vanished | WorkerState::Lost) => {}
            // Checked in and idle, or not yet checked in: free capacity.
            Some(state @ (WorkerState::Starting | WorkerState::ReadyIdle)) => {
                self.starting += usize::from(target);
                self.ready_idle += usize::from(target && state == WorkerState::ReadyIdle);
            }
            // No check-in information: presumed busy after the startup grace.
            None => {
                if target && job.active_for < policy.startup_grace {
                    self.starting += 1;
                }
            }
        }
    }

    /// A pending job that is not stopped: free capacity, unless on hold.
    fn waits(&mut self, job: &ObservedJob) {
        match job.on_hold() {
            true => self.on_hold += 1,
            false => self.pending += 1,
        }
        if !job.on_hold() && may_not_stop(job, false, true).is_none() && !ever_checked_in(job) {
            self.withdrawable.push((job.pending_for, job.id.clone()));
        }
    }

    fn pending_job(&mut self, policy: &PoolPolicy, job: &ObservedJob, target: bool) {
        if target && job.pending.is_blocked() && !ever_checked_in(job) {
            return self.blocked_job(job);
        }
        let Some(timeout) = policy.pending_timeout.filter(|_| target) else {
            return self.waits(job);
        };
        if job.pending_for < timeout || ever_checked_in(job) {
            return self.waits(job);
        }
        if let Some(why) = may_not_stop(job, false, true) {
            self.waits(job);
            self.keep(job, "pending_timeout", (job.pending_for, timeout), why);
            return;
        }
        self.stuck_ids.push(job.id.clone());
        self.stuck.push(Reason::PendingTimeout {
            job_id: job.id.clone(),
            pending_seconds: job.pending_for.as_secs(),
            timeout_seconds: timeout.as_secs(),
        });
    }

    /// A pending job its platform says will not start as it is: stuck now, whatever
    /// `pending_timeout`, when the manager launched it; else kept.
    fn blocked_job(&mut self, job: &ObservedJob) {
        let misconfigured = job.pending == PendingKind::Misconfigured;
        if let Some(why) = may_not_stop(job, false, true) {
            self.waits(job);
            let seconds = (job.pending_for, Duration::ZERO);
            return self.keep(job, "blocked", seconds, why);
        }
        self.stuck_ids.push(job.id.clone());
        self.stuck.push(Reason::Blocked {
            job_id: job.id.clone(),
            pending_seconds: job.pending_for.as_secs(),
            misconfigured,
        });
    }
}
