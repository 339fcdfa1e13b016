//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does
//! it: every replica reads the Lease every fifth of the lease duration (the retry period), the
//! holder renewing it; every write goes with the `resourceVersion` read, so of two replicas
//! racing only one wins (the other gets a 409 and stays a follower).
//!
//! Three rules keep two replicas from ever acting at once:
//! - **Expiry on the reader's own clock.** Another holder's Lease expires once the reader has
//!   seen the record unchanged for `leaseDurationSeconds` on its own monotonic clock
//!   ([`Observer`]); nobody compares its wall clock with the holder's `renewTime`.
//! - **A bounded round.** Each Lease call gives up after a third of the duration, so a hung
//!   call (a half-open connection) never stalls the loop.
//! - **A fence in time.** A successful renew lets the holder act until two thirds of the
//!   duration after the round *started* ([`Leadership`] holds that instant); whether later
//!   calls return or hang, the holder stops acting then, before any standby can have seen the
//!   record unchanged for the whole duration. Reconciles ask [`Leadership::is_leader`] right
//!   before each pod create or delete.
//!
//! [`decide`], [`next_spec`] and [`Observer`] are the pure rules (time comes in as a value);
//! [`run`] is the loop.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

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

/// The step for `identity` given the Lease `spec` (`None`: no Lease), which this replica has
/// seen unchanged for `unchanged_for` on its own clock ([`Observer`]).
pub fn decide(spec: Option<&LeaseSpec>, identity: &str, unchanged_for: Duration) -> Step {
    let Some(spec) = spec else {
        return Step::Create;
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder == identity {
        return Step::Renew;
    }
    let seconds = spec.lease_duration_seconds.unwrap_or(0);
    let duration = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    if holder.is_empty() || unchanged_for >= duration {
        Step::TakeOver { from: holder }
    } else {
        Step::Follow { holder }
    }
}

/// The Lease spec after `step` by `identity` at `now` (the times written are for `kubectl`
/// and other tools; no replica of this operator reads them to decide).
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

/// When this replica last saw the Lease record change, on its own monotonic clock (client-go's
/// `observedRecord` and `observedTime`).
#[derive(Debug, Clone, Default)]
pub struct Observer {
    seen: Option<(Option<LeaseSpec>, Instant)>,
}

impl Observer {
    /// Notes the record read at `now`; returns how long it has been unchanged.
    pub fn observe(&mut self, spec: Option<&LeaseSpec>, now: Instant) -> Duration {
        match &self.seen {
            Some((record, since)) if record.as_ref() == spec => {
                now.saturating_duration_since(*since)
            }
            _ => {
                self.seen = Some((spec.cloned(), now));
                Duration::ZERO
            }
        }
    }
}

/// Whether this replica may act: the instant until which its last renew lets it act (the
/// fence), shared by the Lease loop with every reconcile. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Leadership(watch::Receiver<Option<Instant>>);

impl Leadership {
    /// A new leadership (not the leader) and the sender the Lease loop moves the fence with.
    pub fn channel() -> (watch::Sender<Option<Instant>>, Self) {
        let (tx, rx) = watch::channel(None);
        (tx, Self(rx))
    }

    /// A leadership that never changes: the leader for good (a single replica, tests) or never.
    pub fn fixed(leader: bool) -> Self {
        // About thirty years: far enough, and no overflow on any platform's Instant.
        let forever = Instant::now() + Duration::from_secs(30 * 365 * 86_400);
        let (_, rx) = watch::channel(leader.then_some(forever));
        Self(rx)
    }

    /// Whether this replica may act now: its last renew's fence has not passed.
    pub fn is_leader(&self) -> bool {
        self.0.borrow().is_some_and(|until| Instant::now() < until)
    }

    /// Waits until the Lease loop moves the fence (for tests that follow the election).
    pub async fn changed(&mut self) -> bool {
        self.0.changed().await.is_ok()
    }
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

impl LeaseConfig {
    /// How long after the start of its last successful renew a holder may act.
    pub fn fence(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// How long one Lease call may take.
    pub fn call_timeout(&self) -> Duration {
        self.duration / 3
    }
}

/// Keeps trying to hold the Lease; moves `leader`'s fence after each successful renew, and
/// calls `alive` after every round (whatever its outcome: `/healthz` watches the loop).
pub async fn run(
    client: kube::Client,
    config: LeaseConfig,
    leader: watch::Sender<Option<Instant>>,
    alive: impl Fn(),
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let every = config.duration / 5;
    let mut observer = Observer::default();
    let mut was_leader = false;
    loop {
        let started = Instant::now();
        match try_hold(&api, &config, &mut observer).await {
            Ok(true) => {
                leader.send_replace(Some(started + config.fence()));
                if !was_leader {
                    tracing::info!(identity = %config.identity, lease = %config.name, "became the leader");
                }
            }
            Ok(false) => {
                leader.send_replace(None);
            }
            Err(error) => {
                tracing::warn!(identity = %config.identity, %error, "cannot read or write the lease");
            }
        }
        let is_leader = leader.borrow().is_some_and(|until| Instant::now() < until);
        if was_leader && !is_leader {
            tracing::warn!(identity = %config.identity, "lost the lease: no longer acting");
        }
        was_leader = is_leader;
        alive();
        tokio::time::sleep_until(started + every).await;
    }
}

/// Why a round failed.
#[derive(Debug, thiserror::Error)]
enum RoundError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

async fn bounded<T>(
    config: &LeaseConfig,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, RoundError> {
    let limit = config.call_timeout();
    match tokio::time::timeout(limit, call).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(RoundError::Timeout(limit)),
    }
}

/// One round: read, decide, write. `Ok(true)` when this replica holds the Lease after it.
async fn try_hold(
    api: &Api<Lease>,
    config: &LeaseConfig,
    observer: &mut Observer,
) -> Result<bool, RoundError> {
    let current = bounded(config, api.get_opt(&config.name)).await?;
    let old = current.as_ref().and_then(|l| l.spec.as_ref());
    let unchanged_for = observer.observe(old, Instant::now());
    let step = decide(old, &config.identity, unchanged_for);
    if let Step::Follow { .. } = step {
        return Ok(false);
    }
    if let Step::TakeOver { from } = &step {
        tracing::info!(identity = %config.identity, from = %from, "the lease expired: taking it over");
    }
    let spec = next_spec(
        old,
        &step,
        &config.identity,
        config.duration,
        Timestamp::now(),
    );
    let result = match current {
        None => {
            let mut lease = Lease::default();
            lease.metadata.name = Some(config.name.clone());
            lease.spec = Some(spec);
            bounded(config, api.create(&PostParams::default(), &lease)).await
        }
        Some(mut lease) => {
            lease.spec = Some(spec);
            bounded(
                config,
                api.replace(&config.name, &PostParams::default(), &lease),
            )
            .await
        }
    };
    match result {
        Ok(_) => Ok(true),
        // Another replica wrote first: it holds the Lease.
        Err(RoundError::Api(kube::Error::Api(s))) if s.code == 409 => Ok(false),
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
        let secs = Duration::from_secs;
        let cases = [
            (None, "b", 0, Step::Create),
            (Some(lease("b", 0, 15)), "b", 5, Step::Renew),
            (Some(lease("b", 0, 15)), "b", 60, Step::Renew),
            (Some(lease("a", 0, 15)), "b", 5, follow()),
            (Some(lease("a", 0, 15)), "b", 14, follow()),
            (Some(lease("a", 0, 15)), "b", 15, take()),
            (
                Some(lease("", 10, 15)),
                "b",
                0,
                Step::TakeOver {
                    from: String::new(),
                },
            ),
        ];
        for (spec, me, unchanged, expected) in cases {
            assert_eq!(
                decide(spec.as_ref(), me, secs(unchanged)),
                expected,
                "{spec:?} {me} unchanged for {unchanged} s"
            );
        }
    }

    /// The holder's `renewTime` says nothing: a follower whose wall clock runs far ahead of
    /// the holder's (or a holder whose clock lags) still waits the whole duration of its own
    /// observation.
    #[test]
    fn expiry_is_measured_on_the_readers_clock_not_by_comparing_wall_clocks() {
        let base = Instant::now();
        let mut observer = Observer::default();
        let secs = Duration::from_secs;
        // Renewed "an hour ago" by the holder's clock: a wall-clock rule would take over now.
        let stale_looking = lease("a", -3600, 15);
        let unchanged = observer.observe(Some(&stale_looking), base);
        assert_eq!(
            decide(Some(&stale_looking), "b", unchanged),
            Step::Follow { holder: "a".into() }
        );
        let unchanged = observer.observe(Some(&stale_looking), base + secs(14));
        assert_eq!(unchanged, secs(14));
        assert_eq!(
            decide(Some(&stale_looking), "b", unchanged),
            Step::Follow { holder: "a".into() }
        );
        // The holder renews (whatever its clock says): the reader's count starts again.
        let renewed = lease("a", -3590, 15);
        let unchanged = observer.observe(Some(&renewed), base + secs(14));
        assert_eq!(unchanged, Duration::ZERO);
        let unchanged = observer.observe(Some(&renewed), base + secs(28));
        assert_eq!(
            decide(Some(&renewed), "b", unchanged),
            Step::Follow { holder: "a".into() }
        );
        // Then it stops: 15 s of the reader's own clock later the Lease is free.
        let unchanged = observer.observe(Some(&renewed), base + secs(29));
        assert_eq!(
            decide(Some(&renewed), "b", unchanged),
            Step::TakeOver { from: "a".into() }
        );
        // The Lease disappearing and coming back is a change too.
        assert_eq!(observer.observe(None, base + secs(30)), Duration::ZERO);
    }

    /// The fence ends before any standby may take over: a standby's count starts when it sees
    /// the renewed record, after the round that renewed it started.
    #[test]
    fn the_fence_ends_before_a_standby_may_take_over() {
        let config = LeaseConfig {
            name: "l".into(),
            namespace: "n".into(),
            identity: "a".into(),
            duration: Duration::from_secs(15),
        };
        assert!(config.fence() < config.duration);
        // A round is two calls at most, each bounded: it ends before the fence does.
        assert!(config.call_timeout() * 2 <= config.fence());
        assert!(!Leadership::fixed(false).is_leader());
        assert!(Leadership::fixed(true).is_leader());
        let (tx, leadership) = Leadership::channel();
        assert!(!leadership.is_leader());
        tx.send_replace(Some(Instant::now() + config.fence()));
        assert!(leadership.is_leader());
        // A fence in the past: no longer the leader, with no further word from the loop.
        tx.send_replace(Some(Instant::now() - Duration::from_millis(1)));
        assert!(!leadership.is_leader());
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
    }
}
