//! Spilling by estimated wait (issue #32): a bundle goes to the cheapest fitting pool
//! ([`super::preference_order`]) that is expected to start it within that pool's
//! `spill_after`; past it, to the next pool that would start it sooner. The wait is the one
//! the start-time estimates use ([`super::times::PoolTimes::worker_wait`]): the pool's
//! launch → check-in time, or, when its jobs are queued on their platform (pending past that
//! time, Slurm's reason shown), as long again as the oldest has waited. Pure.

use super::times::minutes;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One fitting pool, as the rule sees it for one bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Candidate {
    /// Seconds until the worker of the pool that would take the bundle checks in; `None`:
    /// the pool cannot take it this tick (backing off, unobserved, at its max).
    pub wait: Option<u64>,
    /// The pool's `spill_after`, in seconds.
    pub spill_after: Option<u64>,
}

/// The rule, over the fitting pools in preference order: the first that can take the bundle,
/// unless its wait exceeds its `spill_after` and a later one would start the bundle sooner.
/// Returns the index of the pool that takes it (if any) and those passed over.
pub(super) fn choose(candidates: &[Candidate]) -> (Option<usize>, Vec<usize>) {
    let mut passed = Vec::new();
    for (i, candidate) in candidates.iter().enumerate() {
        let Some(wait) = candidate.wait else {
            continue;
        };
        let over = candidate.spill_after.is_some_and(|limit| wait > limit);
        let sooner =
            || (candidates[i + 1..].iter()).any(|later| later.wait.is_some_and(|w| w < wait));
        if over && sooner() {
            passed.push(i);
            continue;
        }
        return (Some(i), passed);
    }
    (None, passed)
}

/// A pool's estimated wait for a bundle, against its `spill_after`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolWait {
    /// The pool.
    pub pool: String,
    /// Seconds until its worker would check in.
    pub wait_seconds: u64,
    /// Its `spill_after`.
    pub spill_after_seconds: u64,
    /// What the wait rests on: "job 12 pending 35 min: Resources", "a worker checks in in
    /// ~2 min".
    pub basis: String,
}

impl PoolWait {
    /// "35 min > spill_after 10 min": the figures as they compare (in seconds when minutes
    /// would read alike).
    fn compared(&self) -> String {
        let (wait, limit) = (self.wait_seconds, self.spill_after_seconds);
        let (mut shown, mut limit_shown) = (minutes(wait), minutes(limit));
        if shown == limit_shown && wait != limit {
            (shown, limit_shown) = (format!("{wait} s"), format!("{limit} s"));
        }
        let sign = if wait > limit { ">" } else { "≤" };
        format!("{shown} {sign} spill_after {limit_shown}")
    }
}

/// How `spill_after` weighed on the pool a bundle went to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Spill {
    /// It waits on a pool that has a `spill_after`.
    Waits {
        /// The pool and its wait.
        on: PoolWait,
    },
    /// It went to `to`, past cheaper pools whose wait exceeded their `spill_after`.
    Spilled {
        /// The pool that takes it.
        to: String,
        /// Seconds until that pool's worker would check in (its own estimate: why it wins).
        wait_seconds: u64,
        /// The pools passed over, in preference order.
        from: Vec<PoolWait>,
    },
    /// It waits on another pool past that pool's `hedge_after`, and this pool launches for it
    /// too ([`super::hedge`]): this is the hedge's assignment.
    Hedged {
        /// The two pools and their waits.
        hedge: super::Hedge,
    },
    /// It waits on a pool past that pool's `hedge_after`, and no hedge was made: why.
    Unhedged {
        /// The pool, its wait and why.
        unhedged: super::hedge::Unhedged,
    },
}

impl fmt::Display for Spill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spill::Hedged { hedge } => hedge.fmt(f),
            Spill::Unhedged { unhedged } => unhedged.fmt(f),
            Spill::Waits { on } if on.wait_seconds <= on.spill_after_seconds => {
                write!(f, "waiting on {}: estimated {}", on.pool, on.compared())
            }
            Spill::Waits { on } => write!(
                f,
                "waiting on {}: estimated {} ({}), but no fitting pool starts it sooner",
                on.pool,
                on.compared(),
                on.basis
            ),
            Spill::Spilled {
                to,
                wait_seconds,
                from,
            } => {
                let shown = shown_beside(*wait_seconds, from);
                write!(f, "spilled to {to} (estimated {shown}): ")?;
                for (i, passed) in from.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    let (pool, compared) = (&passed.pool, passed.compared());
                    write!(f, "{sep}{pool} estimated {compared} ({})", passed.basis)?;
                }
                Ok(())
            }
        }
    }
}

/// The taking pool's wait in words, in seconds when it would read like a passed pool's.
fn shown_beside(wait_seconds: u64, passed: &[PoolWait]) -> String {
    let shown = minutes(wait_seconds);
    match passed.iter().any(|p| minutes(p.wait_seconds) == shown) {
        true => format!("{wait_seconds} s"),
        false => shown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(wait: Option<u64>, spill_after: Option<u64>) -> Candidate {
        Candidate { wait, spill_after }
    }

    #[test]
    fn the_rule_as_a_table() {
        let none = None;
        // (candidates in preference order, chosen, passed over)
        let table: &[(&[Candidate], Option<usize>, &[usize])] = &[
            // No spill_after: the cheapest that can take it, whatever its wait.
            (&[c(Some(3600), none), c(Some(60), none)], Some(0), &[]),
            // Within spill_after: stays.
            (&[c(Some(240), Some(600)), c(Some(60), none)], Some(0), &[]),
            // At spill_after exactly: stays (spills only past it).
            (&[c(Some(600), Some(600)), c(Some(60), none)], Some(0), &[]),
            // Past it, and the next is sooner: spills.
            (
                &[c(Some(2100), Some(600)), c(Some(60), none)],
                Some(1),
                &[0],
            ),
            // Past it, but the next is no sooner: paying more to wait longer is no use.
            (
                &[c(Some(2100), Some(600)), c(Some(3000), none)],
                Some(0),
                &[],
            ),
            // Past it, and no other pool can take it now: stays.
            (&[c(Some(2100), Some(600)), c(None, none)], Some(0), &[]),
            // The cheapest cannot take it: the next, as before #32.
            (&[c(None, Some(600)), c(Some(60), none)], Some(1), &[]),
            // Two hops: each past its own spill_after, a sooner one after each.
            (
                &[
                    c(Some(2100), Some(600)),
                    c(Some(900), Some(300)),
                    c(Some(60), none),
                ],
                Some(2),
                &[0, 1],
            ),
            // The middle one is within its own spill_after: it takes the bundle.
            (
                &[
                    c(Some(2100), Some(600)),
                    c(Some(200), Some(300)),
                    c(Some(60), none),
                ],
                Some(1),
                &[0],
            ),
            // Nothing can take it.
            (&[c(None, none), c(None, Some(1))], None, &[]),
        ];
        for (candidates, chosen, passed) in table {
            assert_eq!(
                choose(candidates),
                (*chosen, passed.to_vec()),
                "{candidates:?}"
            );
        }
    }

    /// The seconds a person reads in "45 s", "4 min" or "2 h 5 min".
    fn read(shown: &str) -> u64 {
        let words: Vec<&str> = shown.split(' ').collect();
        let n = |i: usize| words[i].parse::<u64>().unwrap();
        match words.as_slice() {
            [_, "s"] => n(0),
            [_, "min"] => n(0) * 60,
            [_, "h", _, "min"] => n(0) * 3600 + n(2) * 60,
            _ => panic!("unreadable: {shown}"),
        }
    }

    proptest::proptest! {
        /// The comparison a reason prints holds of the figures it prints.
        #[test]
        fn the_printed_comparison_holds_of_the_printed_figures(
            wait_seconds in 0u64..20_000,
            limit in 0u64..20_000,
        ) {
            let shown = wait("p", wait_seconds, limit).compared();
            let (left, rest) = shown.split_once(" spill_after ").unwrap();
            let (figure, sign) = left.rsplit_once(' ').unwrap();
            let (w, l) = (read(figure), read(rest));
            match sign {
                ">" => proptest::prop_assert!(w > l && wait_seconds > limit, "{shown}"),
                "≤" => proptest::prop_assert!(w <= l && wait_seconds <= limit, "{shown}"),
                _ => proptest::prop_assert!(false, "{shown}"),
            }
        }

        /// A spilled bundle's pool reads sooner than the pool it passed over (the rule takes
        /// a later pool only when it is).
        #[test]
        fn the_taking_pool_reads_sooner_than_the_one_passed_over(
            passed in 1u64..20_000,
            sooner_by in 1u64..300,
        ) {
            let taken = passed.saturating_sub(sooner_by);
            let spilled = Spill::Spilled {
                to: "gce".into(),
                wait_seconds: taken,
                from: vec![wait("cpu", passed, 0)],
            };
            let text = spilled.to_string();
            let figure = (text.split_once("(estimated ").unwrap().1)
                .split_once("):")
                .unwrap()
                .0;
            let theirs = (text.split_once("cpu estimated ").unwrap().1)
                .split_once(" > ")
                .unwrap()
                .0;
            proptest::prop_assert!(read(figure) < read(theirs), "{text}");
        }
    }

    fn wait(pool: &str, wait_seconds: u64, spill_after_seconds: u64) -> PoolWait {
        PoolWait {
            pool: pool.into(),
            wait_seconds,
            spill_after_seconds,
            basis: "job 12 pending 35 min: Resources".into(),
        }
    }

    #[test]
    fn the_words_say_what_the_figures_do() {
        let waits = Spill::Waits {
            on: wait("cpu-slurm", 240, 600),
        };
        assert_eq!(
            waits.to_string(),
            "waiting on cpu-slurm: estimated 4 min ≤ spill_after 10 min"
        );
        let spilled = Spill::Spilled {
            to: "gce-spot".into(),
            wait_seconds: 90,
            from: vec![wait("cpu-slurm", 2100, 600)],
        };
        assert_eq!(
            spilled.to_string(),
            "spilled to gce-spot (estimated 90 s): cpu-slurm estimated 35 min > spill_after 10 min (job 12 pending 35 min: Resources)"
        );
        // Minutes that would read alike are given in seconds.
        let close = Spill::Waits {
            on: wait("cpu-slurm", 542, 541),
        };
        assert!(
            close
                .to_string()
                .contains("542 s > spill_after 541 s (job 12"),
            "{close}"
        );
    }
}
