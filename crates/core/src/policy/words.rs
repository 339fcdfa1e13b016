//! What the policy's reasons say in words: the `Display` of [`Reason`] and of
//! [`NotStoppedWhy`], written for the log line, `status` and the page.

use super::{NotStoppedWhy, Reason};
use std::fmt;

/// [`Reason::OnFallback`] in words.
fn on_fallback(f: &mut fmt::Formatter<'_>, to: &str, retry: Option<u64>, why: &str) -> fmt::Result {
    match retry {
        Some(retry) => write!(
            f,
            "new launches go to {to} (one tries this pool again in {retry} s): {why}"
        ),
        None => write!(
            f,
            "one launch tries this pool again; the rest go to {to} until its worker checks in"
        ),
    }
}

/// The words of [`Reason::NotStartedByServer`].
const NOT_STARTED_BY_SERVER: &str = "the server does not start it on an idle worker that fits: one worker was launched for it, no more are (something the dispatch model does not see holds it: its request_disk, the bundle manager, a permission)";

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NoStagedBundles => write!(f, "no staged bundles"),
            Reason::WantWorkers { staged } => {
                write!(
                    f,
                    "want to launch a worker because we have {staged} > 0 staged bundles"
                )
            }
            Reason::RateLimited {
                waited_seconds,
                min_seconds,
            } => write!(
                f,
                "don't launch because waited {waited_seconds} < {min_seconds} seconds since last worker"
            ),
            Reason::PendingCoversDemand { pending, staged } => write!(
                f,
                "don't launch because still more pending workers than staged bundles ({pending} >= {staged})"
            ),
            Reason::MaxReached { jobs, max } => max_reached(f, *jobs, *max),
            Reason::BelowMin { jobs, min } => {
                write!(
                    f,
                    "launch a worker because we are under the minimum ({jobs} < {min})"
                )
            }
            Reason::Target { target, capacity } => {
                write!(f, "target {target} workers, {capacity} count as capacity")
            }
            Reason::Raced { workers, jobs } => write!(
                f,
                "racing (race): {jobs} jobs launched or pending for the {workers} workers the \
                 staged bundles need; the first to check in take them, the rest are withdrawn \
                 before they start"
            ),
            Reason::LaunchCapReached { wanted, cap } => write!(
                f,
                "want {wanted} launches, at most {cap} per tick (max_launches_per_tick)"
            ),
            Reason::BackingOff {
                remaining_seconds,
                failures,
                ..
            } => write!(
                f,
                "skipped: backing off for {remaining_seconds} more seconds after {failures} failures"
            ),
            Reason::Suspended { failures } => write!(
                f,
                "suspended for misconfiguration after {failures} failures in a row with the \
                 same error; fix the pool's settings and reload (SIGHUP) to resume"
            ),
            Reason::OnFallback {
                fallback,
                retry_in_seconds,
                why,
            } => on_fallback(f, fallback, *retry_in_seconds, why),
            Reason::PendingTimeout { .. }
            | Reason::Blocked { .. }
            | Reason::WorkerLost { .. }
            | Reason::Withdrawn { .. } => stop(f, self),
            Reason::NotStopped { .. } | Reason::KeptAsProbe { .. } => kept(f, self),
            Reason::Unobserved { error } => {
                write!(f, "skipped: cannot list the pool's jobs: {error}")
            }
            Reason::BudgetReached { scope, detail, .. } => {
                write!(f, "don't launch: budget of {scope} used up ({detail})")
            }
            Reason::BudgetRoom { .. } => budget_room(f, self),
            Reason::Packed { bundles, workers } => write!(
                f,
                "the {bundles} staged bundles fit on {workers} workers of the pool's shape"
            ),
            Reason::NotStartedByServer => f.write_str(NOT_STARTED_BY_SERVER),
            Reason::NoFittingPool => write!(f, "no pool can run this bundle"),
            Reason::Misfit { detail } | Reason::Held { detail, .. } => write!(f, "{detail}"),
        }
    }
}

/// The words of [`Reason::MaxReached`]: upstream's at the max; below it (target mode, where max
/// caps the target or the launches before the pool is full), the room left.
fn max_reached(f: &mut fmt::Formatter<'_>, jobs: usize, max: u32) -> fmt::Result {
    let max = max as usize;
    if jobs >= max {
        return write!(
            f,
            "don't launch because too many workers already ({jobs} >= {max})"
        );
    }
    let room = max - jobs;
    write!(
        f,
        "capped by max {max}: room for {room} more (jobs: {jobs} < {max})"
    )
}

/// The words of the reasons that stop a job: [`Reason::PendingTimeout`], [`Reason::Blocked`],
/// [`Reason::WorkerLost`] and [`Reason::Withdrawn`].
fn stop(f: &mut fmt::Formatter<'_>, reason: &Reason) -> fmt::Result {
    match reason {
        Reason::PendingTimeout {
            job_id,
            pending_seconds,
            timeout_seconds,
        } => write!(
            f,
            "stop job {job_id}: pending {pending_seconds} s, longer than pending_timeout {timeout_seconds} s"
        ),
        Reason::Blocked {
            job_id,
            pending_seconds,
            misconfigured,
        } => {
            let why = match misconfigured {
                true => "will never start as submitted (misconfigured)",
                false => "has no capacity for it and will make none",
            };
            write!(
                f,
                "stop job {job_id}: pending {pending_seconds} s, and its platform says it {why}"
            )
        }
        Reason::WorkerLost {
            job_id,
            unseen_seconds,
            timeout_seconds,
        } => write!(
            f,
            "stop job {job_id}: its worker never checked in for {unseen_seconds} s, longer than checkin_timeout {timeout_seconds} s"
        ),
        Reason::Withdrawn {
            job_id,
            pending_seconds,
            needed,
            capacity,
        } => write!(
            f,
            "withdraw job {job_id}: pending {pending_seconds} s, not needed ({capacity} jobs count as capacity, {needed} needed)"
        ),
        _ => Ok(()),
    }
}

/// The words of [`Reason::BudgetRoom`].
fn budget_room(f: &mut fmt::Formatter<'_>, reason: &Reason) -> fmt::Result {
    let Reason::BudgetRoom {
        scope,
        wanted,
        room,
        detail,
    } = reason
    else {
        return Ok(());
    };
    write!(
        f,
        "launch {room}, not {wanted}: the budget of {scope} has room for {room} more workers ({detail})"
    )
}

/// The words of the reasons that keep a job: [`Reason::NotStopped`] and [`Reason::KeptAsProbe`].
fn kept(f: &mut fmt::Formatter<'_>, reason: &Reason) -> fmt::Result {
    match reason {
        Reason::NotStopped {
            job_id,
            rule: "blocked",
            why,
            ..
        } => write!(
            f,
            "keep job {job_id}: its platform says it will not start as it is, but {why}"
        ),
        Reason::NotStopped {
            job_id,
            rule,
            seconds,
            timeout_seconds,
            why,
        } => write!(
            f,
            "keep job {job_id}: {rule} would stop it ({seconds} s > {timeout_seconds} s), but {why}"
        ),
        Reason::KeptAsProbe {
            job_id,
            pending_seconds,
            key,
            after_seconds,
        } => write!(
            f,
            "keep job {job_id} though not needed: pending {pending_seconds} s, past {key} \
             {after_seconds} s, its wait sends the next bundles elsewhere at once and its \
             start will say the queue has moved (pending costs nothing)"
        ),
        _ => Ok(()),
    }
}

impl fmt::Display for NotStoppedWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotStoppedWhy::NotLaunchedHere => "this manager did not launch it",
            NotStoppedWhy::NoCheckinSeen => {
                "no worker of this pool has been seen checking in yet (do the workers log in as another account?)"
            }
        })
    }
}
