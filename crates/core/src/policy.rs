//! The scaling policy: a pure function from what was observed to what to do, with reasons.
//!
//! [`plan`] reproduces upstream `WorkerManager.run_one_iteration` rule for rule:
//! 1. want a worker when at least one staged bundle survived the prefilter;
//! 2. veto when fewer than `min_seconds_between_workers` seconds passed since the last launch
//!    (whole seconds, truncated, as upstream's `int(...)`);
//! 3. veto when pending jobs ≥ staged bundles;
//! 4. veto when jobs ≥ `max_workers`;
//! 5. below `min_workers`, launch regardless of every veto;
//! 6. at most one launch per tick.
//!
//! Every rule that fired is reported, in upstream's order, so a log line can say why.

mod words;

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The limits the policy enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyConfig {
    /// `--min-workers`.
    pub min_workers: u32,
    /// `--max-workers`.
    pub max_workers: u32,
    /// `--min-seconds-between-workers`.
    pub min_seconds_between_workers: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            min_workers: 1,
            max_workers: 10,
            min_seconds_between_workers: 60,
        }
    }
}

impl PolicyConfig {
    /// Checks that the limits make sense (`--max-workers` ≥ `--min-workers`).
    pub fn validate(&self) -> Result<(), String> {
        if self.max_workers < self.min_workers {
            return Err(format!(
                "--max-workers ({}) is less than --min-workers ({})",
                self.max_workers, self.min_workers
            ));
        }
        Ok(())
    }
}

/// What the manager saw this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Observation {
    /// Staged bundles left after the prefilter.
    pub staged: usize,
    /// Worker jobs waiting or booting.
    pub pending: usize,
    /// Worker jobs running.
    pub active: usize,
    /// Time since the last launch; `None` when this manager has not launched yet.
    pub since_last_launch: Option<Duration>,
}

impl Observation {
    /// All worker jobs that count (pending + active).
    pub fn jobs(&self) -> usize {
        self.pending + self.active
    }
}

/// Why the policy decided what it did. Serialized in snake_case for logs, status and metrics.
///
/// The first six variants are upstream's rules ([`plan`]); the others come from the pool
/// policy ([`crate::pools::plan_pools`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// No staged bundle needs a worker.
    NoStagedBundles,
    /// Staged bundles want a worker.
    WantWorkers {
        /// Staged bundle count.
        staged: usize,
    },
    /// Too soon after the last launch.
    RateLimited {
        /// Whole seconds since the last launch.
        waited_seconds: u64,
        /// `--min-seconds-between-workers`.
        min_seconds: u64,
    },
    /// Pending workers already cover the staged bundles.
    PendingCoversDemand {
        /// Pending jobs.
        pending: usize,
        /// Staged bundles.
        staged: usize,
    },
    /// `--max-workers` reached, or (target mode) the target capped at it: the words say
    /// which, from the figures.
    MaxReached {
        /// Jobs now.
        jobs: usize,
        /// `--max-workers`.
        max: u32,
    },
    /// Under `--min-workers`: launch regardless.
    BelowMin {
        /// Jobs now.
        jobs: usize,
        /// `--min-workers`.
        min: u32,
    },
    /// Pool policy: the absolute target of a pool in target mode.
    Target {
        /// Workers wanted: clamp(min, active + demand, max), demand raced by the pool's `race`.
        target: u32,
        /// Workers that count as capacity (active + pending, not stuck).
        capacity: usize,
    },
    /// Pool policy: the pool races launches (its `race` above 1): more jobs pend than the
    /// staged bundles need workers, the first to check in take the bundles and the rest are
    /// withdrawn before they start ([`crate::pools`], rule 2).
    Raced {
        /// Workers the staged bundles need (starting and new).
        workers: usize,
        /// Jobs kept launched or pending for them: `ceil(race × workers)` within `max`.
        jobs: usize,
    },
    /// Pool policy: more launches were wanted than `max_launches_per_tick` allows.
    LaunchCapReached {
        /// Launches wanted.
        wanted: u32,
        /// `max_launches_per_tick`.
        cap: u32,
    },
    /// Pool policy: the pool failed recently and is skipped until `until_seconds` (manager clock).
    BackingOff {
        /// End of the backoff, in seconds since the manager started.
        until_seconds: u64,
        /// Seconds left.
        remaining_seconds: u64,
        /// Failures in the current streak.
        failures: u32,
    },
    /// Pool policy: the pool is suspended for misconfiguration (the same error
    /// [`crate::pools::MISCONFIGURED_AFTER`] times in a row) and launches nothing until it
    /// is resumed (a reload, changed settings at a restart, a check-in of its workers).
    Suspended {
        /// Misconfiguration failures in a row, with the same error.
        failures: u32,
    },
    /// Pool policy: the pool's capacity failed; its new launches go to its `fallback`
    /// ([`crate::pools::fallback`]).
    OnFallback {
        /// The pool the launches go to.
        fallback: String,
        /// Seconds until one launch tries the pool again; `None`: that launch is being made
        /// (the rest still go to the fallback until its worker checks in).
        retry_in_seconds: Option<u64>,
        /// Why, in words.
        why: String,
    },
    /// Pool policy: a job waited longer than the pool's `pending_timeout` and is stopped.
    PendingTimeout {
        /// The stuck job.
        job_id: String,
        /// Seconds it has been pending.
        pending_seconds: u64,
        /// The pool's `pending_timeout`.
        timeout_seconds: u64,
    },
    /// Pool policy: a pending job this manager launched, whose worker never checked in, is one
    /// its platform says will not start as it is ([`crate::backend::PendingKind::is_blocked`]):
    /// misconfigured (a misconfiguration failure of the pool) or no capacity to be had (a
    /// capacity failure, as [`Reason::PendingTimeout`]); it is stopped at once. The platform's
    /// own words are in the failure and the log.
    Blocked {
        /// The blocked job.
        job_id: String,
        /// Seconds it has been pending.
        pending_seconds: u64,
        /// Misconfigured (else: no capacity to be had).
        misconfigured: bool,
    },
    /// Pool policy: a pending job this manager launched, whose worker never checked in, is no
    /// longer needed (the pool's capacity is above what its busy workers, its `min` and the
    /// bundles waiting that it could run need: the bundles it was for went to other workers or
    /// away) and is withdrawn before it starts: cancelled on the platform, at no cost where
    /// pending is not billed, and with no backoff (see [`crate::pools`]).
    Withdrawn {
        /// The withdrawn job.
        job_id: String,
        /// Seconds it has been pending.
        pending_seconds: u64,
        /// Workers the pool needs (busy ones, `min`, and one for each waiting bundle it could
        /// run), at most `max`.
        needed: usize,
        /// Jobs counted as capacity (active and pending) before withdrawing.
        capacity: usize,
    },
    /// Pool policy: a pending job the withdraw rule would cancel is kept as the pool's probe
    /// of its queue: the oldest, pending past the pool's `spill_after` or `hedge_after`. Its
    /// wait sends the next bundles elsewhere at once and its start says the queue has moved;
    /// pending costs nothing (see [`crate::pools`]).
    KeptAsProbe {
        /// The kept job.
        job_id: String,
        /// Seconds it has been pending.
        pending_seconds: u64,
        /// `spill_after` or `hedge_after`: the sooner of the two set on the pool.
        #[serde(deserialize_with = "crate::interned::deserialize")]
        key: crate::interned::Code,
        /// That key's seconds.
        after_seconds: u64,
    },
    /// Pool policy: a running job's worker never checked in with the server, for longer than
    /// the pool's `checkin_timeout` over fresh views; the job is stopped and replaced (see
    /// [`crate::checkin`]).
    WorkerLost {
        /// The lost job.
        job_id: String,
        /// Seconds without a check-in (manager clock, fresh views only).
        unseen_seconds: u64,
        /// The pool's `checkin_timeout`.
        timeout_seconds: u64,
    },
    /// Pool policy: a rule (`pending_timeout` or `worker_lost`) would stop the job, but the
    /// manager may not: it did not launch the job, or no worker of the pool has been seen
    /// checking in yet (the workers may log in as an account whose workers the manager cannot
    /// see). The job is kept and counts toward `max`; see [`crate::pools`].
    NotStopped {
        /// The job.
        job_id: String,
        /// The rule that would stop it (`pending_timeout`, `blocked`, `worker_lost`).
        #[serde(deserialize_with = "crate::interned::deserialize")]
        rule: crate::interned::Code,
        /// Seconds pending or without a check-in.
        seconds: u64,
        /// The rule's limit.
        timeout_seconds: u64,
        /// Why it is kept.
        why: NotStoppedWhy,
    },
    /// Pool policy: the pool's jobs could not be listed this tick; it is skipped.
    Unobserved {
        /// The listing error.
        error: String,
    },
    /// Pool policy: the pool's budget, or the overall one, is used up: no launches until the
    /// rolling day has room again (see [`crate::budget`]).
    BudgetReached {
        /// The pool, or `all pools`.
        scope: String,
        /// Which limit, with the figures.
        detail: String,
        /// When launching resumes (manager clock), if no more is used.
        resumes_at_seconds: Option<u64>,
    },
    /// Pool policy: the pool's budget, or the overall one, has room for fewer launches than
    /// wanted, each reserved its minimum life (see [`crate::budget::launch_room`]).
    BudgetRoom {
        /// The pool, or `all pools`.
        scope: String,
        /// Launches wanted.
        wanted: u32,
        /// Launches the budget has room for.
        room: u32,
        /// The figures.
        detail: String,
    },
    /// Pool policy: the server would give the pool's staged bundles to fewer workers than
    /// bundles: a worker runs several while its CPUs, GPUs and memory allow
    /// ([`crate::dispatch`]).
    Packed {
        /// Staged bundles for the pool.
        bundles: usize,
        /// Workers they need: starting ones of the pool and new ones.
        workers: usize,
    },
    /// Pool policy: the server would give this bundle to no new worker of this manager, for
    /// its owner ([`crate::dispatch::Unmet`]: `quota_exhausted`, `own_worker`, `not_ours`).
    Held {
        /// The kind of hold (serialized as its code).
        code: crate::dispatch::Hold,
        /// The bundle's owner (their id).
        owner: String,
        /// Why, in words.
        detail: String,
    },
    /// Pool policy: the server has not started this bundle on a checked-in worker the
    /// dispatch model gave it to (it is overdue: [`crate::pools::ServerView::overdue`]), and
    /// the one worker launched for it did not start it either: something the model does not
    /// see holds it back (its `request_disk`, a stopped bundle-manager, a permission). No
    /// more workers are launched for it.
    NotStartedByServer,
    /// Pool policy: a bundle fits no pool (shape or queue).
    NoFittingPool,
    /// Pool policy: why one pool cannot take a bundle (shape or queue).
    Misfit {
        /// What does not fit.
        detail: String,
    },
}

impl Reason {
    /// The machine-readable name (`rate_limited`, `max_reached` …).
    pub fn code(&self) -> &'static str {
        match self {
            Reason::NoStagedBundles => "no_staged_bundles",
            Reason::WantWorkers { .. } => "want_workers",
            Reason::RateLimited { .. } => "rate_limited",
            Reason::PendingCoversDemand { .. } => "pending_covers_demand",
            Reason::MaxReached { .. } => "max_reached",
            Reason::BelowMin { .. } => "below_min",
            Reason::Target { .. } => "target",
            Reason::Raced { .. } => "raced",
            Reason::LaunchCapReached { .. } => "launch_cap_reached",
            Reason::BackingOff { .. } => "backing_off",
            Reason::Suspended { .. } => "suspended",
            Reason::OnFallback { .. } => "on_fallback",
            Reason::PendingTimeout { .. } => "pending_timeout",
            Reason::Blocked { .. } => "blocked",
            Reason::WorkerLost { .. } => "worker_lost",
            Reason::Withdrawn { .. } => "withdrawn",
            Reason::KeptAsProbe { .. } => "kept_as_probe",
            Reason::NotStopped { .. } => "not_stopped",
            Reason::Unobserved { .. } => "unobserved",
            Reason::BudgetReached { .. } => "budget_reached",
            Reason::BudgetRoom { .. } => "budget_room",
            Reason::Packed { .. } => "packed",
            Reason::Held { code, .. } => code.code(),
            Reason::NotStartedByServer => "not_started_by_server",
            Reason::NoFittingPool => "no_fitting_pool",
            Reason::Misfit { .. } => "misfit",
        }
    }
}

/// Why a job a rule would stop is kept ([`Reason::NotStopped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotStoppedWhy {
    /// This manager's launch record does not hold the job: another manager's, a person's, or
    /// launched before the record was lost.
    NotLaunchedHere,
    /// No worker of the pool has been seen checking in: the workers may log in as another
    /// CodaLab account, whose workers this manager's account cannot see.
    NoCheckinSeen,
}

/// The outcome of one planning step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// How many worker jobs to start now (0 or 1 in upstream mode).
    pub launches: u32,
    /// Every rule that fired, in the order upstream checks them.
    pub reasons: Vec<Reason>,
}

impl Decision {
    /// The reason codes joined by commas, for one-line logs.
    pub fn reason_codes(&self) -> String {
        self.reasons
            .iter()
            .map(Reason::code)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Decides how many workers to launch now. Pure: no I/O, time comes in `observed`.
pub fn plan(observed: &Observation, config: &PolicyConfig) -> Decision {
    let mut reasons = Vec::new();
    let jobs = observed.jobs();
    let mut want = false;
    if observed.staged > 0 {
        reasons.push(Reason::WantWorkers {
            staged: observed.staged,
        });
        want = true;
        if let Some(since) = observed.since_last_launch {
            let waited_seconds = since.as_secs();
            if waited_seconds < config.min_seconds_between_workers {
                reasons.push(Reason::RateLimited {
                    waited_seconds,
                    min_seconds: config.min_seconds_between_workers,
                });
                want = false;
            }
        }
        if observed.pending >= observed.staged {
            reasons.push(Reason::PendingCoversDemand {
                pending: observed.pending,
                staged: observed.staged,
            });
            want = false;
        }
        if jobs >= config.max_workers as usize {
            reasons.push(Reason::MaxReached {
                jobs,
                max: config.max_workers,
            });
            want = false;
        }
    } else {
        reasons.push(Reason::NoStagedBundles);
    }
    if jobs < config.min_workers as usize {
        reasons.push(Reason::BelowMin {
            jobs,
            min: config.min_workers,
        });
        want = true;
    }
    Decision {
        launches: u32::from(want),
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Reason::*;

    fn obs(staged: usize, pending: usize, active: usize, since: Option<u64>) -> Observation {
        Observation {
            staged,
            pending,
            active,
            since_last_launch: since.map(Duration::from_secs),
        }
    }

    const CONFIG: PolicyConfig = PolicyConfig {
        min_workers: 1,
        max_workers: 3,
        min_seconds_between_workers: 60,
    };

    #[test]
    fn upstream_rules_table() {
        #[rustfmt::skip]
        let cases: Vec<(&str, Observation, u32, Vec<&str>)> = vec![
            ("nothing staged, at min", obs(0, 0, 1, None), 0, vec!["no_staged_bundles"]),
            ("nothing staged, below min", obs(0, 0, 0, None), 1, vec!["no_staged_bundles", "below_min"]),
            ("staged, never launched", obs(2, 0, 1, None), 1, vec!["want_workers"]),
            ("staged, long ago", obs(2, 0, 1, Some(60)), 1, vec!["want_workers"]),
            ("rate limited", obs(2, 0, 1, Some(59)), 0, vec!["want_workers", "rate_limited"]),
            ("pending covers", obs(2, 2, 0, None), 0, vec!["want_workers", "pending_covers_demand"]),
            ("pending more than staged", obs(1, 2, 0, None), 0, vec!["want_workers", "pending_covers_demand"]),
            ("pending fewer than staged", obs(3, 2, 0, None), 1, vec!["want_workers"]),
            ("max reached by active", obs(5, 0, 3, None), 0, vec!["want_workers", "max_reached"]),
            ("max reached, mixed", obs(5, 1, 2, None), 0, vec!["want_workers", "max_reached"]),
            ("all vetoes", obs(2, 3, 0, Some(1)), 0, vec!["want_workers", "rate_limited", "pending_covers_demand", "max_reached"]),
            ("below min beats rate limit", obs(2, 0, 0, Some(1)), 1, vec!["want_workers", "rate_limited", "below_min"]),
        ];
        for (name, observed, launches, codes) in cases {
            let decision = plan(&observed, &CONFIG);
            assert_eq!(decision.launches, launches, "{name}");
            let got: Vec<_> = decision.reasons.iter().map(Reason::code).collect();
            assert_eq!(got, codes, "{name}");
        }
    }

    #[test]
    fn below_min_overrides_every_veto() {
        // min above max is rejected by validate(), but the rule order still holds: min wins.
        let config = PolicyConfig {
            min_workers: 2,
            max_workers: 2,
            min_seconds_between_workers: 600,
        };
        let decision = plan(&obs(1, 1, 0, Some(0)), &config);
        assert_eq!(decision.launches, 1);
        assert_eq!(decision.reasons.last(), Some(&BelowMin { jobs: 1, min: 2 }));
    }

    #[test]
    fn rate_limit_truncates_to_whole_seconds() {
        let observed = Observation {
            staged: 1,
            since_last_launch: Some(Duration::from_millis(59_999)),
            ..Default::default()
        };
        let decision = plan(
            &observed,
            &PolicyConfig {
                min_workers: 0,
                ..CONFIG
            },
        );
        assert_eq!(decision.launches, 0);
        assert!(decision.reasons.contains(&RateLimited {
            waited_seconds: 59,
            min_seconds: 60
        }));
    }

    #[test]
    fn zero_max_never_launches_above_zero_min() {
        let config = PolicyConfig {
            min_workers: 0,
            max_workers: 0,
            min_seconds_between_workers: 0,
        };
        assert_eq!(plan(&obs(10, 0, 0, None), &config).launches, 0);
    }

    #[test]
    fn at_most_one_launch_per_tick() {
        let config = PolicyConfig {
            min_workers: 10,
            max_workers: 10,
            min_seconds_between_workers: 0,
        };
        assert_eq!(plan(&obs(100, 0, 0, None), &config).launches, 1);
    }

    #[test]
    fn validate_rejects_max_below_min() {
        let err = PolicyConfig {
            min_workers: 3,
            max_workers: 2,
            min_seconds_between_workers: 0,
        }
        .validate()
        .unwrap_err();
        assert_eq!(err, "--max-workers (2) is less than --min-workers (3)");
        assert!(CONFIG.validate().is_ok());
    }

    #[test]
    fn reasons_read_like_upstream_logs() {
        assert_eq!(
            RateLimited {
                waited_seconds: 3,
                min_seconds: 60
            }
            .to_string(),
            "don't launch because waited 3 < 60 seconds since last worker"
        );
        let json = serde_json::to_string(&MaxReached { jobs: 3, max: 3 }).unwrap();
        assert_eq!(json, r#"{"reason":"max_reached","jobs":3,"max":3}"#);
    }

    /// `max_reached` says "already" only at the max; below it (target mode, the target or
    /// the launches capped) it says how much room is left.
    #[test]
    fn max_reached_says_what_its_figures_say() {
        let table = [
            (
                (4, 4),
                "don't launch because too many workers already (4 >= 4)",
            ),
            (
                (5, 4),
                "don't launch because too many workers already (5 >= 4)",
            ),
            ((2, 4), "capped by max 4: room for 2 more (jobs: 2 < 4)"),
        ];
        for ((jobs, max), words) in table {
            assert_eq!(MaxReached { jobs, max }.to_string(), words);
        }
    }
}
