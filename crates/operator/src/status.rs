//! The pool's status from what one reconcile saw and did: the counts, the unmet demand and
//! the five conditions (Ready, Scaling, BackingOff, Suspended, Degraded), each keeping its
//! `lastTransitionTime` while its status stays the same. Pure.

use crate::crd::{CodaLabWorkerPoolStatus, UnmetStatus};
use crate::memory::Remembered;
use crate::observe::to_streak;
use codalab_wm_core::checkin::JobCheckin;
use codalab_wm_core::policy::Reason;
use codalab_wm_core::pools::{PoolDecision, PoolHealth, PoolObservation, UnmetDemand};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::collections::BTreeMap;

/// What went wrong before the policy could run (the pool is Degraded).
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The condition reason (`InvalidSpec`, `CodaLabUnavailable`, `PodsUnavailable`).
    pub reason: &'static str,
    /// What happened.
    pub message: String,
}

/// What one reconcile saw and did.
#[derive(Debug, Clone, Default)]
pub struct Outcome<'a> {
    /// The spec's generation.
    pub generation: Option<i64>,
    /// The pool's `min`.
    pub min: u32,
    /// `spec.suspend`.
    pub suspended: bool,
    /// The observation, when the pods could be listed.
    pub observation: Option<&'a PoolObservation>,
    /// The policy's decision, when it ran.
    pub decision: Option<&'a PoolDecision>,
    /// The staged bundles no worker is coming for.
    pub unmet: &'a [UnmetDemand],
    /// Pods created / deleted this reconcile.
    pub launched: u32,
    /// Pods deleted this reconcile.
    pub stopped: u32,
    /// Launches that failed (their errors).
    pub launch_errors: Vec<String>,
    /// Why the policy could not run.
    pub problem: Option<Problem>,
    /// The failure streak after this reconcile (`None`: the recorded one stays).
    pub health: Option<PoolHealth>,
    /// What is remembered of check-ins after this reconcile (`None`: the recorded one stays).
    pub remembered: Option<Remembered>,
}

/// The next status after `old`, at `now`.
pub fn next_status(
    old: &CodaLabWorkerPoolStatus,
    outcome: &Outcome<'_>,
    now: &Time,
) -> CodaLabWorkerPoolStatus {
    let mut status = CodaLabWorkerPoolStatus {
        observed_generation: outcome.generation,
        last_scale_time: old.last_scale_time.clone(),
        ..CodaLabWorkerPoolStatus::default()
    };
    if let Some(decision) = outcome.decision {
        status.ready = decision.active as u32;
        status.starting = decision.pending as u32 + decision.launches;
        status.desired = decision
            .target
            .unwrap_or((decision.active + decision.pending) as u32 + decision.launches);
        status.staged = decision.demand as u32;
    }
    status.busy = outcome.observation.map_or(0, busy);
    if outcome.launched + outcome.stopped > 0 {
        status.last_scale_time = Some(now.clone());
    }
    status.unmet = unmet(outcome.unmet);
    status.failures = match outcome.health {
        Some(health) => to_streak(&health),
        None => old.failures.clone(),
    };
    (status.checked_in, status.workers_seen) = match &outcome.remembered {
        Some(r) => (r.checked_in.iter().cloned().collect(), r.workers_seen),
        None => (old.checked_in.clone(), old.workers_seen),
    };
    status.conditions = conditions(outcome, &status)
        .into_iter()
        .map(|(kind, on, reason, message)| {
            condition(old, kind, on, reason, message, outcome.generation, now)
        })
        .collect();
    status
}

fn busy(observation: &PoolObservation) -> u32 {
    observation
        .jobs
        .iter()
        .filter(|j| matches!(j.checkin, JobCheckin::CheckedIn { runs, .. } if runs > 0))
        .count() as u32
}

fn unmet(demand: &[UnmetDemand]) -> Vec<UnmetStatus> {
    let mut by_reason: BTreeMap<&'static str, u32> = BTreeMap::new();
    for d in demand {
        *by_reason.entry(d.reason.code()).or_default() += d.bundles as u32;
    }
    by_reason
        .into_iter()
        .map(|(reason, bundles)| UnmetStatus {
            reason: reason.to_owned(),
            bundles,
        })
        .collect()
}

type Verdict = (&'static str, bool, String, String);

/// Each condition: (type, status, reason, message).
fn conditions(outcome: &Outcome<'_>, status: &CodaLabWorkerPoolStatus) -> Vec<Verdict> {
    let reasons = outcome.decision.map_or(&[][..], |d| &d.reasons[..]);
    let backing_off = reasons
        .iter()
        .find(|r| matches!(r, Reason::BackingOff { .. }));
    let ready = outcome.problem.is_none() && status.ready >= outcome.min;
    let scaling = outcome.launched + outcome.stopped > 0;
    let degraded = outcome.problem.clone().or_else(|| {
        (!outcome.launch_errors.is_empty()).then(|| Problem {
            reason: "LaunchFailed",
            message: outcome.launch_errors.join("; "),
        })
    });
    vec![
        (
            "Ready",
            ready,
            if ready {
                "MinimumReady"
            } else {
                "BelowMinimum"
            }
            .into(),
            format!(
                "{} of at least {} workers running",
                status.ready, outcome.min
            ),
        ),
        (
            "Scaling",
            scaling,
            if scaling { "Scaled" } else { "Steady" }.into(),
            format!(
                "launched {}, deleted {}; target {}",
                outcome.launched, outcome.stopped, status.desired
            ),
        ),
        (
            "BackingOff",
            backing_off.is_some(),
            if backing_off.is_some() {
                "BackingOff"
            } else {
                "NoFailures"
            }
            .into(),
            backing_off.map_or_else(
                || "no recent launch failures".to_owned(),
                ToString::to_string,
            ),
        ),
        (
            "Suspended",
            outcome.suspended,
            if outcome.suspended {
                "SpecSuspend"
            } else {
                "Active"
            }
            .into(),
            if outcome.suspended {
                "spec.suspend is true: no launches"
            } else {
                "launching as needed"
            }
            .into(),
        ),
        (
            "Degraded",
            degraded.is_some(),
            degraded.as_ref().map_or("AsExpected", |p| p.reason).into(),
            degraded.map_or_else(|| "reconciled".to_owned(), |p| p.message),
        ),
    ]
}

fn condition(
    old: &CodaLabWorkerPoolStatus,
    kind: &str,
    on: bool,
    reason: String,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if on { "True" } else { "False" }.to_owned();
    let previous = old.conditions.iter().find(|c| c.type_ == kind);
    let last_transition_time = match previous {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_: kind.to_owned(),
        status,
        reason,
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// Whether `kind` turned true between `old` and `new` (an Event's cue).
pub fn turned_on(old: &CodaLabWorkerPoolStatus, new: &CodaLabWorkerPoolStatus, kind: &str) -> bool {
    let on = |s: &CodaLabWorkerPoolStatus| {
        s.conditions
            .iter()
            .any(|c| c.type_ == kind && c.status == "True")
    };
    on(new) && !on(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use codalab_wm_core::LaunchMode;
    use k8s_openapi::jiff::Timestamp;

    fn time(seconds: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + seconds).unwrap())
    }

    fn decision(
        active: usize,
        pending: usize,
        launches: u32,
        reasons: Vec<Reason>,
    ) -> PoolDecision {
        PoolDecision {
            pool: "p".into(),
            launch_mode: LaunchMode::Target,
            launches,
            hedges: 0,
            stops: Vec::new(),
            target: Some((active + pending) as u32 + launches),
            demand: 3,
            workers_needed: 3,
            active,
            pending,
            stopping: 0,
            surplus: 0,
            watch: None,
            reasons,
        }
    }

    fn state(status: &CodaLabWorkerPoolStatus, kind: &str) -> (String, String) {
        let c = status.conditions.iter().find(|c| c.type_ == kind).unwrap();
        (c.status.clone(), c.reason.clone())
    }

    #[test]
    fn conditions_follow_the_outcome() {
        let backing_off = Reason::BackingOff {
            until_seconds: 9,
            remaining_seconds: 5,
            failures: 2,
        };
        let launching = decision(1, 0, 2, Vec::new());
        let backing = decision(1, 0, 0, vec![backing_off]);
        let problem = Problem {
            reason: "CodaLabUnavailable",
            message: "down".into(),
        };
        /// (condition type, status, reason), three per case.
        type Expected<'a> = [(&'a str, &'a str, &'a str); 3];
        let cases: Vec<(Outcome, Expected)> = vec![
            (
                Outcome {
                    min: 1,
                    decision: Some(&launching),
                    launched: 2,
                    ..Outcome::default()
                },
                [
                    ("Ready", "True", "MinimumReady"),
                    ("Scaling", "True", "Scaled"),
                    ("Degraded", "False", "AsExpected"),
                ],
            ),
            (
                Outcome {
                    min: 2,
                    decision: Some(&backing),
                    ..Outcome::default()
                },
                [
                    ("Ready", "False", "BelowMinimum"),
                    ("BackingOff", "True", "BackingOff"),
                    ("Scaling", "False", "Steady"),
                ],
            ),
            (
                Outcome {
                    min: 0,
                    problem: Some(problem),
                    ..Outcome::default()
                },
                [
                    ("Ready", "False", "BelowMinimum"),
                    ("Degraded", "True", "CodaLabUnavailable"),
                    ("Suspended", "False", "Active"),
                ],
            ),
            (
                Outcome {
                    suspended: true,
                    launch_errors: vec!["quota".into()],
                    ..Outcome::default()
                },
                [
                    ("Suspended", "True", "SpecSuspend"),
                    ("Degraded", "True", "LaunchFailed"),
                    ("BackingOff", "False", "NoFailures"),
                ],
            ),
        ];
        for (outcome, expected) in cases {
            let status = next_status(&CodaLabWorkerPoolStatus::default(), &outcome, &time(0));
            for (kind, on, reason) in expected {
                assert_eq!(
                    state(&status, kind),
                    (on.to_owned(), reason.to_owned()),
                    "{kind}: {outcome:?}"
                );
            }
            assert_eq!(status.conditions.len(), 5);
        }
    }

    #[test]
    fn counts_and_transition_times() {
        let d = decision(2, 1, 1, Vec::new());
        let outcome = Outcome {
            generation: Some(4),
            min: 1,
            decision: Some(&d),
            launched: 1,
            ..Outcome::default()
        };
        let first = next_status(&CodaLabWorkerPoolStatus::default(), &outcome, &time(0));
        assert_eq!(
            (first.ready, first.starting, first.desired, first.staged),
            (2, 2, 4, 3)
        );
        assert_eq!(first.observed_generation, Some(4));
        assert_eq!(first.last_scale_time, Some(time(0)));
        let quiet = Outcome {
            launched: 0,
            ..outcome.clone()
        };
        let second = next_status(&first, &quiet, &time(30));
        assert_eq!(second.last_scale_time, Some(time(0)), "no scale, same time");
        let ready = second
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            ready.last_transition_time,
            time(0),
            "still True: no transition"
        );
        let scaling = second
            .conditions
            .iter()
            .find(|c| c.type_ == "Scaling")
            .unwrap();
        assert_eq!(scaling.last_transition_time, time(30));
        assert!(turned_on(
            &CodaLabWorkerPoolStatus::default(),
            &first,
            "Scaling"
        ));
        assert!(!turned_on(&first, &first, "Scaling"));
    }
}
