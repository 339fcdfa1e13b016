//! The withdraw rule (rule 5 of the module doc): a pending job of this manager that never
//! checked in and that the plan no longer needs is cancelled before it starts, less the
//! pool's probe of its queue. Table-tested in `withdraw_tests.rs`.

use super::census::Census;
use super::{PoolDecision, PoolObservation, PoolPolicy};
use crate::policy::Reason;
use std::time::Duration;

/// Withdraws the pending jobs no longer needed: as many as `capacity` stands above `wanted`
/// (the workers the busy ones and every waiting bundle the pool could run need, though it was
/// assigned elsewhere: a spilled bundle keeps its first pool's job until a worker takes it)
/// within `min` and `max`, among the jobs the manager may withdraw ([`Census::withdrawable`]:
/// its own, never checked in, not on hold), the most recently submitted first (the platform
/// would start them last), less the pool's probe ([`probe`]). So what is withdrawn is a launch
/// no bundle and no minimum waits for; and only once every decision has found a surplus for
/// the pool's `withdraw_after` (none by default: at once).
pub(super) fn withdraw(
    policy: &PoolPolicy,
    observed: &PoolObservation,
    census: &Census,
    (wanted, capacity): (usize, usize),
    decision: &mut PoolDecision,
) {
    let needed = wanted.max(policy.min as usize).min(policy.max as usize);
    let mut newest_first = census.withdrawable.clone();
    newest_first.sort();
    let surplus = capacity.saturating_sub(needed).min(newest_first.len());
    let kept = (surplus > 0)
        .then(|| probe(policy, &mut newest_first))
        .flatten();
    decision.surplus = surplus.min(newest_first.len());
    if let Some(kept) = kept {
        decision.reasons.push(kept);
    }
    let lasted = observed.surplus_for;
    let waited = policy.withdraw_after.is_zero()
        || lasted.is_some_and(|lasted| lasted >= policy.withdraw_after);
    if !waited {
        return;
    }
    for (pending_for, job_id) in newest_first.into_iter().take(decision.surplus) {
        decision.stops.push(job_id.clone());
        decision.reasons.push(Reason::Withdrawn {
            job_id,
            pending_seconds: pending_for.as_secs(),
            needed,
            capacity,
        });
    }
}

/// The pool's probe of its queue, taken out of the jobs to withdraw (newest first): its
/// oldest pending job, once it has waited past the pool's `spill_after` or `hedge_after`
/// (the sooner). Its wait is what the pool's estimates rest on, so it sends the next bundles
/// elsewhere at once, and its start is how the manager learns that the queue has moved.
/// Withdrawn, that knowledge goes with it: every new burst would wait `spill_after` again to
/// learn what the old job knew. Pending costs nothing ([`crate::backend::JobState::Pending`]),
/// so keeping it does too; one per pool, and only on a pool that sends bundles elsewhere by
/// their wait.
fn probe(policy: &PoolPolicy, newest_first: &mut Vec<(Duration, String)>) -> Option<Reason> {
    let (key, after) = [
        ("spill_after", policy.spill_after),
        ("hedge_after", policy.hedge_after),
    ]
    .into_iter()
    .filter_map(|(key, after)| Some((key, after?)))
    .min_by_key(|(_, after)| *after)?;
    let (pending_for, _) = newest_first.last()?;
    if *pending_for < after {
        return None;
    }
    let (pending_for, job_id) = newest_first.pop()?;
    Some(Reason::KeptAsProbe {
        job_id,
        pending_seconds: pending_for.as_secs(),
        key,
        after_seconds: after.as_secs(),
    })
}
