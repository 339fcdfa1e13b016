//! Hedging (issue #42 item 2): a bundle expected to wait on its pool past that pool's
//! `hedge_after` is also launched for on a later fitting pool that would start it sooner and
//! takes hedges (`hedges_per_day`): the first of the two workers to check in takes it, and
//! the other launch, once no staged bundle needs it, is withdrawn if it has not started (the
//! withdraw rule, `withdraw_after` later). What hedging may cost is bounded by the paying
//! pool: at most `hedges_per_day` of its launches in a rolling day are for hedges (a hedge
//! that lands on a worker of that pool already starting costs nothing). Pure.
//!
//! Against `spill_after`: a spill moves the bundle and gives up the queued pool's place; a
//! hedge keeps it and buys the sooner start too, for the price of a worker that may boot for
//! nothing.

use super::times::minutes;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Of the fitting pools in preference order, by the seconds each would take to start a
/// bundle (`waits`; `None`: it cannot take it), the one a bundle that goes to `chosen` is
/// hedged on: when its wait there is past `hedge_after` (seconds), the first later pool that
/// `accepts` a hedge and would start it sooner, or why there is none. `None` when the wait
/// is within `hedge_after` (or the pool has none): no hedge is due.
pub(super) fn target(
    waits: &[Option<u64>],
    chosen: usize,
    hedge_after: Option<u64>,
    accepts: impl Fn(usize) -> bool,
) -> Option<Result<usize, &'static str>> {
    let wait = waits[chosen]?;
    if wait <= hedge_after? {
        return None;
    }
    let sooner = |k: &usize| waits[*k].is_some_and(|w| w < wait);
    let mut later = (chosen + 1..waits.len()).filter(sooner).peekable();
    if later.peek().is_none() {
        return Some(Err(NONE_SOONER));
    }
    Some(later.find(|&k| accepts(k)).ok_or(NO_HEDGE_LEFT))
}

/// Why a bundle past `hedge_after` is not hedged: no later pool would start it sooner.
const NONE_SOONER: &str = "no fitting pool would start it sooner";

/// Why a bundle past `hedge_after` is not hedged: those that would start it sooner take no
/// more hedges today.
const NO_HEDGE_LEFT: &str =
    "no fitting pool that would start it sooner has a hedge left today (hedges_per_day)";

/// A bundle hedged: it waits on `from`, and is launched for on `to` too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hedge {
    /// The pool it is hedged on.
    pub to: String,
    /// Seconds until that pool's worker would check in.
    pub wait_seconds: u64,
    /// The pool it waits on.
    pub from: String,
    /// Seconds until that pool's worker would check in.
    pub from_wait_seconds: u64,
    /// That pool's `hedge_after`.
    pub hedge_after_seconds: u64,
    /// What that wait rests on ("job 12 pending 35 min: Resources").
    pub basis: String,
}

impl fmt::Display for Hedge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [to, from, limit] = [
            self.wait_seconds,
            self.from_wait_seconds,
            self.hedge_after_seconds,
        ]
        .map(minutes);
        write!(
            f,
            "hedged on {} (estimated {to}): {} estimated {from} > hedge_after {limit} ({}); the first worker to check in takes it",
            self.to, self.from, self.basis
        )
    }
}

/// A bundle past its pool's `hedge_after` that is not hedged, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unhedged {
    /// The pool it waits on.
    pub pool: String,
    /// Seconds until that pool's worker would check in.
    pub wait_seconds: u64,
    /// That pool's `hedge_after`.
    pub hedge_after_seconds: u64,
    /// Why no hedge was made.
    pub why: String,
}

impl fmt::Display for Unhedged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (wait, limit) = (
            minutes(self.wait_seconds),
            minutes(self.hedge_after_seconds),
        );
        write!(
            f,
            "waiting on {}: estimated {wait} > hedge_after {limit}, not hedged: {}",
            self.pool, self.why
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(wait: Option<u64>) -> Option<u64> {
        wait
    }

    #[test]
    fn the_rule_as_a_table() {
        fn all(_: usize) -> bool {
            true
        }
        fn only_2(k: usize) -> bool {
            k == 2
        }
        // (candidates, chosen, hedge_after, accepts, hedged on)
        type Accepts = fn(usize) -> bool;
        type Row<'a> = (
            &'a [Option<u64>],
            usize,
            Option<u64>,
            Accepts,
            Option<Result<usize, &'static str>>,
        );
        let (hedged, none) = (|k| Some(Ok(k)), None);
        let why = |why| Some(Err(why));
        let table: &[Row] = &[
            // Past hedge_after, a later pool is sooner and takes hedges: hedged there.
            (&[c(Some(600)), c(Some(60))], 0, Some(120), all, hedged(1)),
            // Within hedge_after: no hedge.
            (&[c(Some(100)), c(Some(60))], 0, Some(120), all, none),
            (&[c(Some(120)), c(Some(60))], 0, Some(120), all, none),
            // No hedge_after on the pool: none.
            (&[c(Some(600)), c(Some(60))], 0, None, all, none),
            // The later pool is no sooner, or cannot take it: none, and why.
            (
                &[c(Some(600)), c(Some(600))],
                0,
                Some(120),
                all,
                why(NONE_SOONER),
            ),
            (
                &[c(Some(600)), c(None)],
                0,
                Some(120),
                all,
                why(NONE_SOONER),
            ),
            // A later pool is sooner but takes no more hedges today.
            (
                &[c(Some(600)), c(Some(60))],
                0,
                Some(120),
                only_2,
                why(NO_HEDGE_LEFT),
            ),
            // The first later pool that takes hedges and is sooner.
            (
                &[c(Some(600)), c(Some(30)), c(Some(90))],
                0,
                Some(120),
                only_2,
                hedged(2),
            ),
            // Only later pools: never a cheaper one.
            (
                &[c(Some(30)), c(Some(600))],
                1,
                Some(120),
                all,
                why(NONE_SOONER),
            ),
        ];
        for (i, (candidates, chosen, hedge_after, accepts, expected)) in table.iter().enumerate() {
            let got = target(candidates, *chosen, *hedge_after, accepts);
            assert_eq!(got, *expected, "row {i}");
        }
    }

    #[test]
    fn the_words_say_what_was_weighed() {
        let hedge = Hedge {
            to: "paid".into(),
            wait_seconds: 45,
            from: "cpu".into(),
            from_wait_seconds: 600,
            hedge_after_seconds: 120,
            basis: "job 12 pending 5 min: Resources".into(),
        };
        assert_eq!(
            hedge.to_string(),
            "hedged on paid (estimated 45 s): cpu estimated 10 min > hedge_after 2 min (job 12 pending 5 min: Resources); the first worker to check in takes it"
        );
    }
}
