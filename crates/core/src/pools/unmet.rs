//! Why demand is unmet: for every staged bundle that has no worker coming this tick, a
//! machine-readable reason, grouped per pool and bundle class (what the bundle asks for).
//! Pure: read from the tick's observation and decision (`status`'s "waiting" table, `/status`
//! `unmet`, `codalab_wm_unmet_bundles{reason}`).

use super::{BundleAssignment, Coverage, PoolDecision, PoolPolicy, UnservedBundle};
use crate::bundle::StagedBundle;
use crate::dispatch::Hold;
use crate::policy::Reason;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a class of bundles asks for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BundleClass {
    /// `request_cpus`.
    pub cpus: u32,
    /// `request_gpus`.
    pub gpus: u32,
    /// `request_memory` in bytes.
    pub memory_bytes: u64,
    /// `request_queue` (empty: none).
    pub queue: String,
}

impl From<&StagedBundle> for BundleClass {
    fn from(bundle: &StagedBundle) -> Self {
        Self {
            cpus: bundle.request_cpus,
            gpus: bundle.request_gpus,
            memory_bytes: bundle.request_memory,
            queue: bundle.request_queue.clone(),
        }
    }
}

/// Why bundles have no worker coming.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum UnmetReason {
    /// No pool can run them: what does not fit, per pool (`gpu: request_gpus=64 > worker gpus=2`).
    NoFittingPool {
        /// Each pool's misfit.
        detail: String,
    },
    /// The pool that would take them is at `max`.
    MaxReached {
        /// Jobs counting toward `max`.
        jobs: usize,
        /// `max`.
        max: u32,
    },
    /// The pool that would take them backs off after failures until `until_seconds`.
    BackingOff {
        /// End of the backoff (manager clock).
        until_seconds: u64,
        /// Failures in the streak.
        failures: u32,
    },
    /// The pool may launch for them, but not yet: `min_seconds_between_workers` or
    /// `max_launches_per_tick` (`by`).
    Paced {
        /// `rate_limited` or `launch_cap_reached`.
        #[serde(deserialize_with = "crate::interned::deserialize")]
        by: crate::interned::Code,
    },
    /// They wait for the pool's starting workers (pending, or running and not yet checked in).
    WaitingForStarting {
        /// Starting workers of the pool.
        starting: usize,
    },
    /// Their owner has no `parallel_run_quota` left for shared workers (the manager's).
    QuotaExhausted {
        /// The owner (id).
        owner: String,
    },
    /// Their owner's quota is used up and a worker of the owner's own will take them.
    OwnWorker {
        /// The owner (id).
        owner: String,
    },
    /// The manager's workers are private to its user, and another user owns them.
    NotOurs {
        /// The owner (id).
        owner: String,
    },
    /// The server does not start them on a checked-in worker that fits, nor on the one
    /// worker launched for each ([`Reason::NotStartedByServer`]): no more are launched.
    NotStartedByServer {
        /// In words.
        detail: String,
    },
    /// The pool takes nothing this tick for another reason: its platform could not be read
    /// (`unobserved`), its budget is used up (`budget_reached`), it is suspended for
    /// misconfiguration (`suspended`), its launches go to its fallback (`on_fallback`), or it
    /// is stopping a stuck or lost job (`pending_timeout`, `blocked`, `worker_lost`).
    PoolUnavailable {
        /// The reason code.
        #[serde(deserialize_with = "crate::interned::deserialize")]
        code: crate::interned::Code,
        /// The reason, in words.
        detail: String,
    },
}

impl UnmetReason {
    /// The machine-readable name (the `reason` label of `codalab_wm_unmet_bundles`).
    pub fn code(&self) -> &'static str {
        match self {
            UnmetReason::NoFittingPool { .. } => "no_fitting_pool",
            UnmetReason::MaxReached { .. } => "max_reached",
            UnmetReason::BackingOff { .. } => "backing_off",
            UnmetReason::Paced { .. } => "paced",
            UnmetReason::WaitingForStarting { .. } => "waiting_for_starting",
            UnmetReason::QuotaExhausted { .. } => "quota_exhausted",
            UnmetReason::OwnWorker { .. } => "own_worker",
            UnmetReason::NotOurs { .. } => "not_ours",
            UnmetReason::NotStartedByServer { .. } => "not_started_by_server",
            UnmetReason::PoolUnavailable { .. } => "pool_unavailable",
        }
    }
}

/// Bundles of one class, for one pool (none for `no_fitting_pool`), waiting for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmetDemand {
    /// The pool that would take them, if one fits.
    pub pool: Option<String>,
    /// What they ask for.
    pub class: BundleClass,
    /// How many.
    pub bundles: usize,
    /// Why no worker is coming.
    #[serde(flatten)]
    pub reason: UnmetReason,
}

/// Every staged bundle with no worker coming, grouped by pool, class and reason.
/// `starting` holds each pool's starting workers (pending and not checked in), by policy index.
pub(super) fn unmet_demand(
    bundles: &[StagedBundle],
    policies: &[PoolPolicy],
    decisions: &[PoolDecision],
    assignments: &[BundleAssignment],
    unserved: &[UnservedBundle],
    starting: &[usize],
) -> Vec<UnmetDemand> {
    let by_uuid: BTreeMap<&str, &StagedBundle> =
        bundles.iter().map(|b| (b.uuid.as_str(), b)).collect();
    let mut groups: BTreeMap<(Option<String>, BundleClass, UnmetReason), usize> = BTreeMap::new();
    let mut add = |pool: Option<String>, uuid: &str, reason: UnmetReason| {
        if let Some(bundle) = by_uuid.get(uuid) {
            *groups
                .entry((pool, BundleClass::from(*bundle), reason))
                .or_default() += 1;
        }
    };
    for bundle in unserved {
        let (pool, reason) = unserved_reason(bundle);
        add(pool, &bundle.uuid, reason);
    }
    for (index, (policy, decision)) in policies.iter().zip(decisions).enumerate() {
        let mine = assignments.iter().filter(|a| a.pool == policy.name);
        let mut launching = decision.launches as usize;
        for assignment in mine {
            let reason = match assignment.coverage {
                Coverage::PendingWorker => UnmetReason::WaitingForStarting {
                    starting: starting.get(index).copied().unwrap_or(0),
                },
                Coverage::NewWorker | Coverage::Compat if launching > 0 => {
                    launching -= 1;
                    continue;
                }
                Coverage::NewWorker | Coverage::Compat => match pacing(decision) {
                    Some(by) => UnmetReason::Paced { by },
                    None => continue,
                },
            };
            add(Some(policy.name.clone()), &assignment.uuid, reason);
        }
    }
    groups
        .into_iter()
        .map(|((pool, class, reason), bundles)| UnmetDemand {
            pool,
            class,
            bundles,
            reason,
        })
        .collect()
}

/// What holds a pool's launches back, if pacing does.
fn pacing(decision: &PoolDecision) -> Option<&'static str> {
    decision.reasons.iter().find_map(|r| match r {
        Reason::RateLimited { .. } | Reason::LaunchCapReached { .. } => Some(r.code()),
        _ => None,
    })
}

/// The pool and reason of a bundle no pool takes.
fn unserved_reason(bundle: &UnservedBundle) -> (Option<String>, UnmetReason) {
    let pool = bundle
        .pools
        .iter()
        .find(|v| v.reason.code() == bundle.reason.code())
        .map(|v| v.pool.clone());
    let reason = match &bundle.reason {
        Reason::NoFittingPool => {
            let detail = bundle
                .pools
                .iter()
                .map(|v| format!("{}: {}", v.pool, v.reason))
                .collect::<Vec<_>>()
                .join("; ");
            return (None, UnmetReason::NoFittingPool { detail });
        }
        Reason::Held { code, owner, .. } => {
            let owner = owner.clone();
            let reason = match code {
                Hold::QuotaExhausted => UnmetReason::QuotaExhausted { owner },
                Hold::OwnWorker => UnmetReason::OwnWorker { owner },
                Hold::NotOurs => UnmetReason::NotOurs { owner },
            };
            return (None, reason);
        }
        Reason::NotStartedByServer => {
            let detail = bundle.reason.to_string();
            return (None, UnmetReason::NotStartedByServer { detail });
        }
        Reason::MaxReached { jobs, max } => UnmetReason::MaxReached {
            jobs: *jobs,
            max: *max,
        },
        Reason::BackingOff {
            until_seconds,
            failures,
            ..
        } => UnmetReason::BackingOff {
            until_seconds: *until_seconds,
            failures: *failures,
        },
        other => UnmetReason::PoolUnavailable {
            code: other.code(),
            detail: other.to_string(),
        },
    };
    (pool, reason)
}

#[cfg(test)]
mod tests {
    use super::super::{ObservedJob, PoolHealth, PoolObservation, PoolsObservation, plan_pools};
    use super::*;
    use crate::backend::JobState;
    use crate::bundle::WorkerShape;
    use std::time::Duration;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn pool(name: &str, gpus: u32, max: u32, tag: Option<&str>) -> PoolPolicy {
        PoolPolicy {
            max,
            tag: tag.map(str::to_owned),
            min_seconds_between_workers: 0,
            max_launches_per_tick: 10,
            ..PoolPolicy::new(name, WorkerShape::from_flags(4, gpus, 8192))
        }
    }

    fn bundle(n: u32, gpus: u32, queue: &str) -> StagedBundle {
        StagedBundle {
            request_cpus: 1,
            request_gpus: gpus,
            request_queue: queue.into(),
            ..StagedBundle::new(format!("0x{n}"))
        }
    }

    fn active(n: usize) -> Vec<ObservedJob> {
        (0..n)
            .map(|i| ObservedJob::new(format!("a{i}"), JobState::Active, S(0), S(3600)))
            .collect()
    }

    fn codes(unmet: &[UnmetDemand]) -> Vec<(Option<&str>, &'static str, usize)> {
        unmet
            .iter()
            .map(|u| (u.pool.as_deref(), u.reason.code(), u.bundles))
            .collect()
    }

    #[test]
    fn every_bundle_without_a_worker_coming_has_a_reason() {
        let policies = [
            pool("cpu", 0, 1, None),
            pool("gpu", 2, 4, Some("gpuq")),
            PoolPolicy {
                min_seconds_between_workers: 600,
                tag_exclusive: true,
                ..pool("slow", 0, 10, Some("slowq"))
            },
        ];
        let backing_off = PoolHealth {
            failures: 2,
            last_failure: Some(S(100)),
            backoff_until: Some(S(700)),
            ..PoolHealth::default()
        };
        let observed = PoolsObservation {
            times: Vec::new(),
            server: None,
            bundles: vec![
                bundle(1, 64, "gpuq"),
                bundle(2, 0, ""),
                bundle(3, 0, ""),
                bundle(4, 1, "gpuq"),
                bundle(5, 0, "slowq"),
                bundle(6, 0, "slowq"),
            ],
            pools: vec![
                PoolObservation {
                    jobs: active(1),
                    ..PoolObservation::default()
                },
                PoolObservation {
                    health: backing_off,
                    ..PoolObservation::default()
                },
                PoolObservation {
                    jobs: vec![ObservedJob::new("p", JobState::Pending, S(5), S(0))],
                    since_last_launch: Some(S(10)),
                    ..PoolObservation::default()
                },
            ],
        };
        let decision = plan_pools(&observed, &policies, S(200));
        assert_eq!(
            codes(&decision.unmet),
            [
                (None, "no_fitting_pool", 1),
                (Some("cpu"), "max_reached", 2),
                (Some("gpu"), "backing_off", 1),
                (Some("slow"), "paced", 1),
                (Some("slow"), "waiting_for_starting", 1),
            ],
            "{:#?}",
            decision.unmet
        );
        let no_fit = &decision.unmet[0];
        assert_eq!(no_fit.class.gpus, 64);
        let UnmetReason::NoFittingPool { detail } = &no_fit.reason else {
            unreachable!()
        };
        assert!(
            detail.contains("gpu: request_gpus=64 > worker gpus=2"),
            "{detail}"
        );
        assert_eq!(
            decision.unmet[2].reason,
            UnmetReason::BackingOff {
                until_seconds: 700,
                failures: 2
            }
        );
        assert_eq!(
            decision.unmet[4].reason,
            UnmetReason::WaitingForStarting { starting: 1 }
        );
    }

    #[test]
    fn bundles_a_launch_covers_are_not_unmet() {
        let policies = [pool("cpu", 0, 10, None)];
        let observed = PoolsObservation {
            times: Vec::new(),
            server: None,
            bundles: vec![bundle(1, 0, ""), bundle(2, 0, "")],
            pools: vec![PoolObservation::default()],
        };
        let decision = plan_pools(&observed, &policies, S(0));
        assert_eq!(decision.launches(), 2);
        assert!(decision.unmet.is_empty(), "{:?}", decision.unmet);
        // Capped: the launch covers one, the other is paced.
        let capped = [PoolPolicy {
            max_launches_per_tick: 1,
            ..pool("cpu", 0, 10, None)
        }];
        let decision = plan_pools(&observed, &capped, S(0));
        assert_eq!(codes(&decision.unmet), [(Some("cpu"), "paced", 1)]);
    }
}
