//! Leader election against the in-process fake Kubernetes API server (`codalab-wm-fake-k8s`;
//! there is no real API server on these machines), with two replicas of the real Lease loop
//! on real time (a 3 s Lease, so the test takes seconds).
//!
//! A hung renew: the leader's Lease writes are held unanswered by the fake (as a half-open
//! connection after an API server failover does) while the standby's calls go through. The
//! leader must stop acting before the standby takes over, whether or not its call ever returns:
//! never two leaders.

use codalab_wm_fake_k8s::{FakeApiServer, Method};
use codalab_wm_operator::lease::{self, Leadership, LeaseConfig};
use std::time::Duration;

fn replica(identity: &str) -> LeaseConfig {
    LeaseConfig {
        name: "codalab-wm-operator".into(),
        namespace: "codalab-wm".into(),
        identity: identity.into(),
        duration: Duration::from_secs(3),
    }
}

/// Starts the Lease loop of `identity`; returns its leadership.
fn start(fake: &FakeApiServer, identity: &str) -> Leadership {
    let client = kube::Client::try_from(kube::Config::new(fake.url().parse().unwrap())).unwrap();
    let (tx, leadership) = Leadership::channel();
    tokio::spawn(lease::run(client, replica(identity), tx, || {}));
    leadership
}

/// Waits (on the loop's own events, bounded so a broken loop fails rather than hangs) until
/// `leadership` says it leads.
async fn until_leader(leadership: &mut Leadership) {
    let wait = async {
        while !leadership.is_leader() {
            assert!(leadership.changed().await, "the lease loop ended");
        }
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .expect("a leader within 120 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renew_hangs_stops_acting_before_the_standby_takes_over() {
    let fake = FakeApiServer::start().await;
    let mut a = start(&fake, "a");
    until_leader(&mut a).await;
    // Every Lease write of `a` from now on goes unanswered; its reads still work.
    fake.hang(Method::PUT, r#""holderIdentity":"a""#, usize::MAX);
    let mut b = start(&fake, "b");
    until_leader(&mut b).await;
    assert!(
        !a.is_leader(),
        "two leaders: `a` still acts while `b` took the lease over"
    );
    let lease = fake
        .object(
            "coordination.k8s.io/leases",
            "codalab-wm",
            "codalab-wm-operator",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "b", "{lease}");
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease}");
    // `a` kept trying: its renews were sent (and held), each given up after its timeout.
    let puts = fake
        .requests()
        .iter()
        .filter(|r| r.starts_with("PUT /apis/coordination.k8s.io/v1/namespaces/codalab-wm/leases/"))
        .count();
    assert!(puts >= 2, "{:?}", fake.requests());
}
