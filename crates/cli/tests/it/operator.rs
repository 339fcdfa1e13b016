//! `cl-worker-manager operator` against the REAL CodaLab 1.7.5 server (`cargo xtask services
//! up codalab`) and the in-process fake Kubernetes API server (`codalab-wm-fake-k8s`, with its
//! automatic kubelet): there is no real Kubernetes API server on these machines, so the fake
//! stands in for one (CRD, pools, pods, Leases, Events, watches).
//!
//! - bundles staged on the real server (as bob, in this test's own queue) become worker pods of
//!   the right pool, never more than `max`; raising `max` with a merge patch (what `kubectl
//!   apply` sends) makes more pods without a restart; deleting the pool deletes its pods;
//! - two operator processes share one Lease: the leader is killed with SIGKILL, the other takes
//!   over within the lease duration and raises the pool to its new max, never above it.
//!
//! The tests wait for the fake's state with a deadline; they never sleep to synchronise.
//! Locally a missing CodaLab server skips them; under `CI=true` they fail.
#![cfg(feature = "k8s")]

use crate::support;
use support::bundles::Server;
use support::manager::BIN;
use support::{codalab_running, stage_queued, unique};

use codalab_wm_core::testing::require_service;
use codalab_wm_fake_k8s::FakeApiServer;
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const USER: (&str, &str) = ("bob", "bobpw");
const NS: &str = "team";
const POOLS: &str = "codalab.org/codalabworkerpools";
/// Time for the operator to see a change and act (a loaded 2-core machine).
const WITHIN: Duration = Duration::from_secs(60);

/// The fake API server on a runtime of its own (the CodaLab helpers block).
struct Cluster {
    runtime: tokio::runtime::Runtime,
    fake: FakeApiServer,
    http: reqwest::Client,
}

impl Cluster {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let fake = runtime.block_on(FakeApiServer::start());
        fake.auto_kubelet(true);
        let cluster = Self {
            runtime,
            fake,
            http: reqwest::Client::new(),
        };
        let crd = codalab_wm_operator::crd::crd_json();
        cluster.send(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "application/json",
            &crd,
        );
        // Opted in: the operator uses only Secrets labelled for worker credentials.
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "codalab-creds",
                "labels": {"codalab.org/worker-credentials": "true"}},
            "stringData": {"codalab-username": USER.0, "codalab-password": USER.1}});
        cluster.send(
            "POST",
            &format!("/api/v1/namespaces/{NS}/secrets"),
            "application/json",
            &secret,
        );
        cluster
    }

    fn send(&self, method: &str, path: &str, content_type: &str, body: &Value) -> Value {
        let url = format!("{}{path}", self.fake.url());
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        self.runtime.block_on(async {
            let reply = self
                .http
                .request(method, url)
                .header("content-type", content_type)
                .json(body)
                .send()
                .await
                .unwrap();
            let status = reply.status();
            let body: Value = reply.json().await.unwrap();
            assert!(status.is_success(), "{path}: {status} {body}");
            body
        })
    }

    fn create_pool(&self, name: &str, tag: &str, max: u32) {
        self.create_pool_with(name, tag, max, json!({}));
    }

    /// A pool of queue `tag` with `max`, and `extra` merged into its spec.
    fn create_pool_with(&self, name: &str, tag: &str, max: u32, extra: Value) {
        let mut spec = json!({"server": support::SERVER, "credentialsSecret": "codalab-creds", "min": 0, "max": max,
                "tag": tag, "tagExclusive": true, "maxLaunchesPerTick": 10, "minSecondsBetweenWorkers": 0});
        for (key, value) in extra.as_object().unwrap() {
            spec[key] = value.clone();
        }
        let pool = json!({"apiVersion": "codalab.org/v1alpha1", "kind": "CodaLabWorkerPool",
            "metadata": {"name": name}, "spec": spec});
        self.send(
            "POST",
            &format!("/apis/codalab.org/v1alpha1/namespaces/{NS}/codalabworkerpools"),
            "application/json",
            &pool,
        );
    }

    fn set_max(&self, name: &str, max: u32) {
        let path = format!("/apis/codalab.org/v1alpha1/namespaces/{NS}/codalabworkerpools/{name}");
        self.send(
            "PATCH",
            &path,
            "application/merge-patch+json",
            &json!({"spec": {"max": max}}),
        );
    }

    /// The live (not terminating) pods of pool `name`.
    fn pods(&self, name: &str) -> usize {
        self.fake
            .pods(NS)
            .values()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("codalab.org/pool"))
                    .map(String::as_str)
                    == Some(name)
            })
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count()
    }

    /// Waits until `done`; checks `never` at every look (an invariant).
    fn wait(
        &self,
        what: &str,
        done: impl Fn(&Self) -> bool,
        never: impl Fn(&Self) -> Option<String>,
    ) {
        let deadline = Instant::now() + WITHIN;
        loop {
            if let Some(broken) = never(self) {
                panic!("while waiting for {what}: {broken}");
            }
            if done(self) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {WITHIN:?}; pods: {:?}",
                self.fake.pods(NS).keys()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn lease_holder(&self) -> Option<String> {
        let lease = self.fake.object(
            "coordination.k8s.io/leases",
            "codalab-wm",
            "codalab-wm-operator",
        )?;
        lease["spec"]["holderIdentity"].as_str().map(str::to_owned)
    }
}

/// Real `kubectl` (Debian's `kubernetes-client`) against the fake, in namespace `team`.
struct Kubectl {
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(cluster: &Cluster) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: {NS}\n\
             current-context: fake\nusers:\n- name: fake\n  user:\n    token: fake\n",
            cluster.fake.url()
        );
        std::fs::write(dir.path().join("kubeconfig"), config).unwrap();
        Self { dir }
    }

    /// `kubectl apply` of a pool of queue `tag` with `max` (and a pod template).
    fn apply_pool(&self, name: &str, tag: &str, max: u32) -> String {
        let pool = format!(
            "apiVersion: codalab.org/v1alpha1\nkind: CodaLabWorkerPool\nmetadata:\n  name: {name}\nspec:\n\
             \x20 server: {}\n  credentialsSecret: codalab-creds\n  min: 0\n  max: {max}\n  tag: {tag}\n\
             \x20 tagExclusive: true\n  maxLaunchesPerTick: 10\n  minSecondsBetweenWorkers: 0\n\
             \x20 podTemplate:\n    nodeSelector:\n      codalab.org/workers: \"true\"\n",
            support::SERVER
        );
        let file = self.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, pool).unwrap();
        self.run(&["apply", "--validate=false", "-f", file.to_str().unwrap()])
    }

    fn run(&self, args: &[&str]) -> String {
        let output = Command::new("/usr/bin/kubectl")
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("HOME", self.dir.path())
            .args(args)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "kubectl {args:?}: {text}");
        text
    }
}

/// An operator process serving `/healthz` and `/metrics` on its address, SIGKILLed when
/// dropped.
struct Operator(Child, std::net::SocketAddr);

impl Operator {
    fn start(cluster: &Cluster, identity: &str) -> Self {
        // A free loopback port (taken back from the kernel; the operator binds it next).
        let health = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let child = Command::new(BIN)
            .args([
                "operator",
                "--cluster-host",
                cluster.fake.url(),
                "--health-listen",
                &health.to_string(),
            ])
            .args([
                "--identity",
                identity,
                "--lease-namespace",
                "codalab-wm",
                "--lease-seconds",
                "3",
                "--sync-seconds",
                "1",
            ])
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Self(child, health)
    }

    /// The body of `GET /metrics`.
    fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(self.1).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: operator\r\n\r\n")
            .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        reply
    }

    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

fn above(cluster: &Cluster, pool: &str, max: usize) -> Option<String> {
    let pods = cluster.pods(pool);
    (pods > max).then(|| format!("{pods} pods, max {max}"))
}

#[test]
fn staged_bundles_become_pods_max_raised_by_kubectl_apply_adds_more_delete_removes_them() {
    let _turn = support::turn(module_path!());
    if !(require_service("codalab", codalab_running())
        && require_service("kubectl", std::path::Path::new("/usr/bin/kubectl").exists()))
    {
        return;
    }
    let tag = unique("op");
    let bundles = stage_queued(USER.0, 3, &tag, &[]);
    let cluster = Cluster::start();
    let kubectl = Kubectl::new(&cluster);
    assert!(kubectl.apply_pool("cpu", &tag, 2).contains("created"));
    cluster.create_pool("idle", &unique("none"), 2);
    let operator = Operator::start(&cluster, "only");
    cluster.wait(
        "2 pods for 3 staged bundles",
        |c| c.pods("cpu") == 2,
        |c| above(c, "cpu", 2),
    );
    // The Event follows the pods it reports.
    let launched = |c: &Cluster| {
        let events = c.fake.objects("events.k8s.io/events");
        events
            .iter()
            .any(|e| e["reason"] == "WorkersLaunched" && e["regarding"]["name"] == "cpu")
    };
    cluster.wait("a WorkersLaunched event on the pool", launched, |c| {
        above(c, "cpu", 2)
    });
    let pod = cluster.fake.pods(NS).into_values().next().unwrap();
    let spec = pod.spec.unwrap();
    assert_eq!(spec.node_selector.unwrap()["codalab.org/workers"], "true");
    assert_eq!(pod.metadata.owner_references.unwrap()[0].name, "cpu");
    assert!(kubectl.apply_pool("cpu", &tag, 5).contains("configured"));
    cluster.wait(
        "a third pod once max is 5",
        |c| c.pods("cpu") == 3,
        |c| above(c, "cpu", 3),
    );
    let observed =
        |c: &Cluster| c.fake.object(POOLS, NS, "cpu").unwrap()["status"]["observedGeneration"] == 2;
    cluster.wait("the status of generation 2", observed, |c| {
        above(c, "cpu", 3)
    });
    // kubectl describe shows the conditions and the Events of the pool.
    let described = kubectl.run(&["describe", "clwp", "cpu"]);
    for needle in [
        "Type:                  Ready",
        "Reason:                MinimumReady",
        "WorkersLaunched",
    ] {
        assert!(described.contains(needle), "no {needle:?} in:\n{described}");
    }
    // Its metrics say it leads, what the pool's status says, and the Events it published.
    let metrics = operator.metrics();
    for line in [
        "codalab_wm_operator_leader 1",
        r#"codalab_wm_operator_pool_workers{namespace="team",pool="cpu",field="max"} 5"#,
        r#"codalab_wm_operator_pool_workers{namespace="team",pool="cpu",field="staged"} 3"#,
        r#"codalab_wm_operator_events_total{reason="WorkersLaunched"}"#,
        r#"codalab_wm_operator_reconciles_total{result="ok"}"#,
    ] {
        assert!(metrics.contains(line), "no {line:?} in:\n{metrics}");
    }
    let listed = kubectl.run(&["get", "codalabworkerpools", "cpu"]);
    let row: Vec<&str> = listed.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..3], ["cpu", "0", "5"], "{listed}");
    assert_eq!(
        cluster.pods("idle"),
        0,
        "the other pool's queue has no bundles"
    );
    // kubectl waits until the operator has deleted the pods and removed its finalizer.
    assert!(
        kubectl
            .run(&["delete", "codalabworkerpool", "cpu"])
            .contains("deleted")
    );
    assert_eq!(cluster.pods("cpu"), 0);
    assert!(cluster.fake.object(POOLS, NS, "cpu").is_none());
    Server::login(USER.0, USER.1).remove(&bundles);
}

/// The live pods of pool `name`, by name.
fn pod_names(cluster: &Cluster, name: &str) -> std::collections::BTreeSet<String> {
    (cluster.fake.pods(NS).into_iter())
        .filter(|(_, p)| {
            p.metadata.deletion_timestamp.is_none()
                && (p.metadata.labels.as_ref()).and_then(|l| l.get("codalab.org/pool"))
                    == Some(&name.to_owned())
        })
        .map(|(pod, _)| pod)
        .collect()
}

/// Review 2026-11-27 §1 through real `kubectl`: two pools whose names differ only by `.`
/// and `-` (one manager id before the fix) each get their own pods, and deleting one with
/// `kubectl delete` leaves the other's pods running while the operator goes on reconciling.
#[test]
fn pools_whose_names_differ_only_by_a_dot_keep_their_own_pods_when_one_is_deleted() {
    let _turn = support::turn(module_path!());
    if !(require_service("codalab", codalab_running())
        && require_service("kubectl", std::path::Path::new("/usr/bin/kubectl").exists()))
    {
        return;
    }
    let (dotted, dashed) = ("gpu-a.b", "gpu-a-b");
    let (tag_dotted, tag_dashed) = (unique("opdot"), unique("opdash"));
    let mut bundles = stage_queued(USER.0, 1, &tag_dotted, &[]);
    bundles.extend(stage_queued(USER.0, 1, &tag_dashed, &[]));
    let cluster = Cluster::start();
    let kubectl = Kubectl::new(&cluster);
    assert!(
        kubectl
            .apply_pool(dotted, &tag_dotted, 1)
            .contains("created")
    );
    assert!(
        kubectl
            .apply_pool(dashed, &tag_dashed, 1)
            .contains("created")
    );
    let operator = Operator::start(&cluster, "only");
    let neither_above = |c: &Cluster| above(c, dotted, 1).or_else(|| above(c, dashed, 1));
    cluster.wait(
        "a pod for each pool",
        |c| c.pods(dotted) == 1 && c.pods(dashed) == 1,
        neither_above,
    );
    let kept = pod_names(&cluster, dashed);
    assert!(
        kubectl
            .run(&["delete", "codalabworkerpool", dotted])
            .contains("deleted")
    );
    assert_eq!(cluster.pods(dotted), 0, "the deleted pool's pods are gone");
    // Reconciles go on after the deletion; the other pool's pod is the same one throughout.
    let reconciles = |o: &Operator| {
        (o.metrics().lines())
            .find(|l| l.starts_with(r#"codalab_wm_operator_reconciles_total{result="ok"}"#))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = reconciles(&operator);
    cluster.wait(
        "three more reconciles after the deletion",
        |_| reconciles(&operator) >= before + 3.0,
        |c| {
            let now = pod_names(c, dashed);
            (now != kept).then(|| format!("{dashed}'s pods were {kept:?}, now {now:?}"))
        },
    );
    Server::login(USER.0, USER.1).remove(&bundles);
}

#[test]
fn a_standby_takes_over_when_the_leader_is_killed_and_never_exceeds_max() {
    let _turn = support::turn(module_path!());
    if !require_service("codalab", codalab_running()) {
        return;
    }
    let tag = unique("ha");
    let bundles = stage_queued(USER.0, 5, &tag, &[]);
    let cluster = Cluster::start();
    cluster.create_pool("ha", &tag, 2);
    let mut a = Operator::start(&cluster, "replica-a");
    let mut b = Operator::start(&cluster, "replica-b");
    cluster.wait("2 pods", |c| c.pods("ha") == 2, |c| above(c, "ha", 2));
    let leader = cluster.lease_holder().expect("a lease holder");
    let (dead, standby) = if leader == "replica-a" {
        (&mut a, "replica-b")
    } else {
        (&mut b, "replica-a")
    };
    dead.kill();
    cluster.set_max("ha", 4);
    cluster.wait(
        "the standby holding the lease",
        |c| c.lease_holder().as_deref() == Some(standby),
        |c| above(c, "ha", 4),
    );
    cluster.wait(
        "4 pods from the new leader",
        |c| c.pods("ha") == 4,
        |c| above(c, "ha", 4),
    );
    // The status, written after the pods, reports the new spec.
    let observed =
        |c: &Cluster| c.fake.object(POOLS, NS, "ha").unwrap()["status"]["observedGeneration"] == 2;
    cluster.wait("the status of generation 2", observed, |c| {
        above(c, "ha", 4)
    });
    drop((a, b));
    Server::login(USER.0, USER.1).remove(&bundles);
}

#[test]
fn pods_pending_too_long_are_deleted_and_the_pool_backs_off() {
    let _turn = support::turn(module_path!());
    if !require_service("codalab", codalab_running()) {
        return;
    }
    let tag = unique("stuck");
    let bundles = stage_queued(USER.0, 2, &tag, &[]);
    let cluster = Cluster::start();
    cluster.fake.hold(true);
    cluster.create_pool_with("stuck", &tag, 2, json!({"pendingTimeout": 2}));
    let _operator = Operator::start(&cluster, "only");
    cluster.wait(
        "2 pending pods",
        |c| c.pods("stuck") == 2,
        |c| above(c, "stuck", 2),
    );
    let event = |reason: &'static str| {
        move |c: &Cluster| {
            let events = c.fake.objects("events.k8s.io/events");
            events
                .iter()
                .any(|e| e["reason"] == reason && e["regarding"]["name"] == "stuck")
        }
    };
    cluster.wait("a PendingTimeout event", event("PendingTimeout"), |c| {
        above(c, "stuck", 2)
    });
    cluster.wait("a BackoffStarted event", event("BackoffStarted"), |c| {
        above(c, "stuck", 2)
    });
    // The operator publishes the Event before it writes the reconcile's status: wait for
    // the status that records the streak (reading it right after the Event raced).
    let backing_off = |c: &Cluster| {
        let status = &c.fake.object(POOLS, NS, "stuck").unwrap()["status"];
        status["failures"]["count"].as_u64() >= Some(1)
            && status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "BackingOff" && c["status"] == "True")
    };
    cluster.wait("the status backing off", backing_off, |c| {
        above(c, "stuck", 2)
    });
    // Backing off (5 minutes): the deleted pods are not replaced.
    cluster.wait(
        "the stuck pods gone",
        |c| c.pods("stuck") == 0,
        |c| above(c, "stuck", 2),
    );
    Server::login(USER.0, USER.1).remove(&bundles);
}
