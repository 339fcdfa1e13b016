//! The race (rule 2's `race`, module doc): how many jobs a pool keeps launched or pending for
//! the workers its staged bundles fill, what it says of them, and how soon the manager looks
//! again while they pend. Rule 5 (`withdraw.rs`) withdraws the losers. Table-tested in
//! `withdraw_tests.rs` (`race_rules_table`).

use super::PoolPolicy;
use crate::policy::Reason;
use std::time::Duration;

/// The jobs to keep launched or pending for `workers` the bundles fill, raced by the pool's
/// `race` ([`PoolPolicy::raced`]) but for the `overdue` bundles' workers: the server holds
/// those back for a reason the dispatch model cannot see, so a raced worker would idle.
pub(super) fn jobs(policy: &PoolPolicy, workers: usize, overdue: usize) -> usize {
    let overdue = overdue.min(workers);
    policy.raced(workers - overdue) + overdue
}

/// Reason `raced` when the pool keeps more jobs than the bundles need workers: the `raced`
/// jobs for `workers`, within what `max` leaves beside the `busy` ones.
pub(super) fn said(
    policy: &PoolPolicy,
    (workers, raced): (usize, usize),
    busy: usize,
) -> Option<Reason> {
    (raced > workers).then(|| Reason::Raced {
        workers,
        jobs: raced.min((policy.max as usize).saturating_sub(busy)),
    })
}

/// The pool's `race_watch` while its race is open: it keeps `raced` jobs for `workers` (more:
/// reason `raced`) and some of its jobs pend on the platform (`pending`), so the first may
/// start any moment and the losers go at the first tick after the winners check in
/// ([`super::PoolsDecision::next_tick`]). None otherwise: a pool at its max with nothing
/// pending has nothing to withdraw, however long its queue; this tick's launches pend from
/// the next tick on, which then watches them (a dry run's, which never pend, keep the
/// `sleep_time` pace).
pub(super) fn watch(
    policy: &PoolPolicy,
    (workers, raced): (usize, usize),
    pending: usize,
) -> Option<Duration> {
    (raced > workers && pending > 0).then_some(policy.race_watch)
}
