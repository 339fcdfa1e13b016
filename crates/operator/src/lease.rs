//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does
//! it: every replica reads the Lease every fifth of the lease duration (the retry period), the
//! holder renewing `spec.renewTime`; another replica takes the Lease over once `renewTime +
//! leaseDurationSeconds` has passed (so within the duration and one retry period of the
//! holder's last renewal); every write goes with the `resourceVersion` read, so of two
//! replicas racing only one wins (the other gets a 409 and stays a follower). A holder that could not renew for two thirds of the duration
//! stops acting before anyone may take over, so two replicas never act at once.
//!
//! [`decide`] is the pure rule (time comes in as a value); [`run`] is the loop.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use std::time::Duration;
use tokio::sync::watch;

/// What a replica does with the Lease it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// There is no Lease: create it, holding it.
    Create,
    /// It is ours: renew it.
    Renew,
    /// Its holder let it expire: take it over.
    TakeOver {
        /// The holder that let it expire.
        from: String,
    },
    /// Someone else holds it: follow.
    Follow {
        /// The holder.
        holder: String,
    },
}

/// The step for `identity` given the Lease `spec` (`None`: no Lease) at `now`.
pub fn decide(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> Step {
    let Some(spec) = spec else {
        return Step::Create;
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == identity {
        return Step::Renew;
    }
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0);
    let expired = holder.is_empty()
        || renewed.is_none_or(|t| t.checked_add(duration).is_ok_and(|end| end <= now));
    if expired {
        Step::TakeOver { from: holder }
    } else {
        Step::Follow { holder }
    }
}

/// The Lease spec after `step` by `identity` at `now`.
pub fn next_spec(
    old: Option<&LeaseSpec>,
    step: &Step,
    identity: &str,
    duration: Duration,
    now: Timestamp,
) -> LeaseSpec {
    let mut spec = old.cloned().unwrap_or_default();
    if !matches!(step, Step::Renew) {
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions =
            Some(spec.lease_transitions.unwrap_or(0) + i32::from(old.is_some()));
    }
    spec.holder_identity = Some(identity.to_owned());
    spec.lease_duration_seconds = Some(duration.as_secs().try_into().unwrap_or(i32::MAX));
    spec.renew_time = Some(MicroTime(now));
    spec
}

/// Where the Lease is and who this replica is.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// The Lease's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// This replica's identity.
    pub identity: String,
    /// How long a holder keeps the Lease without renewing it.
    pub duration: Duration,
}

/// Keeps trying to hold the Lease; `leader` says whether this replica holds it now.
pub async fn run(client: kube::Client, config: LeaseConfig, leader: watch::Sender<bool>) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let every = config.duration / 5;
    let mut last_renewed: Option<tokio::time::Instant> = None;
    loop {
        match try_hold(&api, &config).await {
            Ok(true) => {
                last_renewed = Some(tokio::time::Instant::now());
                if !*leader.borrow() {
                    tracing::info!(identity = %config.identity, lease = %config.name, "became the leader");
                }
                leader.send_replace(true);
            }
            Ok(false) => {
                if *leader.borrow() {
                    tracing::warn!(identity = %config.identity, "lost the lease");
                }
                leader.send_replace(false);
            }
            Err(error) => {
                tracing::warn!(identity = %config.identity, %error, "cannot read or write the lease");
                // Stop acting before another replica may take over.
                if last_renewed.is_none_or(|t| t.elapsed() >= config.duration * 2 / 3) {
                    leader.send_replace(false);
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// One round: read, decide, write. `Ok(true)` when this replica holds the Lease after it.
async fn try_hold(api: &Api<Lease>, config: &LeaseConfig) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    let current = api.get_opt(&config.name).await?;
    let step = decide(
        current.as_ref().and_then(|l| l.spec.as_ref()),
        &config.identity,
        now,
    );
    if let Step::Follow { .. } = step {
        return Ok(false);
    }
    if let Step::TakeOver { from } = &step {
        tracing::info!(identity = %config.identity, from = %from, "the lease expired: taking it over");
    }
    let spec = next_spec(
        current.as_ref().and_then(|l| l.spec.as_ref()),
        &step,
        &config.identity,
        config.duration,
        now,
    );
    let result = match current {
        None => {
            let mut lease = Lease::default();
            lease.metadata.name = Some(config.name.clone());
            lease.spec = Some(spec);
            api.create(&PostParams::default(), &lease).await
        }
        Some(mut lease) => {
            lease.spec = Some(spec);
            api.replace(&config.name, &PostParams::default(), &lease)
                .await
        }
    };
    match result {
        Ok(_) => Ok(true),
        // Another replica wrote first: it holds the Lease.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn lease(holder: &str, renewed: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(at(renewed))),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn who_acts_when() {
        let follow = || Step::Follow { holder: "a".into() };
        let take = || Step::TakeOver { from: "a".into() };
        let cases = [
            (None, "b", 0, Step::Create),
            (Some(lease("b", 0, 15)), "b", 5, Step::Renew),
            (Some(lease("b", 0, 15)), "b", 60, Step::Renew),
            (Some(lease("a", 0, 15)), "b", 5, follow()),
            (Some(lease("a", 0, 15)), "b", 14, follow()),
            (Some(lease("a", 0, 15)), "b", 15, take()),
            (Some(lease("a", 10, 15)), "b", 20, follow()),
            (
                Some(lease("", 10, 15)),
                "b",
                11,
                Step::TakeOver {
                    from: String::new(),
                },
            ),
        ];
        for (spec, me, now, expected) in cases {
            assert_eq!(
                decide(spec.as_ref(), me, at(now)),
                expected,
                "{spec:?} {me} at {now}"
            );
        }
    }

    #[test]
    fn taking_over_counts_a_transition_renewing_does_not() {
        let old = lease("a", 0, 15);
        let taken = next_spec(
            Some(&old),
            &Step::TakeOver { from: "a".into() },
            "b",
            Duration::from_secs(15),
            at(20),
        );
        assert_eq!(taken.holder_identity.as_deref(), Some("b"));
        assert_eq!(taken.lease_transitions, Some(1));
        assert_eq!(taken.acquire_time, Some(MicroTime(at(20))));
        let renewed = next_spec(
            Some(&taken),
            &Step::Renew,
            "b",
            Duration::from_secs(15),
            at(25),
        );
        assert_eq!(renewed.lease_transitions, Some(1));
        assert_eq!(renewed.acquire_time, Some(MicroTime(at(20))));
        assert_eq!(renewed.renew_time, Some(MicroTime(at(25))));
        let created = next_spec(None, &Step::Create, "b", Duration::from_secs(15), at(0));
        assert_eq!(created.lease_transitions, Some(0));
        assert_eq!(
            decide(Some(&renewed), "a", at(39)),
            Step::Follow { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&renewed), "a", at(40)),
            Step::TakeOver { from: "b".into() }
        );
    }
}
