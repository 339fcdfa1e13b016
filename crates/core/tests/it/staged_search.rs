//! The staged search of a tick (`CodaLabClient::staged_for`): pages sized to what the pools
//! need, `.count` for the rest, the count reused while nothing moves. Against the in-process
//! fake CodaLab server (`codalab-wm-fake-codalab`), and against the REAL CodaLab 1.7.5 server of
//! `cargo xtask services up codalab` (bundles staged by `xtask/services/codalab/stage.sh` as
//! bob in a queue of their own; locally a missing server skips those, under `CI=true` they fail).

use codalab_wm_core::bundle::StagedBundle;
use codalab_wm_core::codalab::{ClientOptions, CodaLabClient, CountEvery, staged_keywords};
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::require_service;
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn credentials(username: &str, password: &str) -> Credentials {
    Credentials {
        username: username.into(),
        password: Secret::new(password),
    }
}

/// A need of `n` bundles, whatever they are.
fn wants(n: usize) -> impl Fn(&[StagedBundle]) -> usize {
    move |read| n.saturating_sub(read.len())
}

/// Counts that last an hour, so that a slow machine cannot make one expire mid-test.
const HOUR: CountEvery = CountEvery {
    moving: Duration::from_secs(3600),
    steady: Duration::from_secs(3600),
};

fn client_counting(url: &str, username: &str, password: &str, every: CountEvery) -> CodaLabClient {
    let options = ClientOptions {
        count_every: every,
        ..ClientOptions::default()
    };
    CodaLabClient::with_options(url, credentials(username, password), &options).unwrap()
}

async fn fake_with(n: u64) -> (FakeCodaLab, CodaLabClient) {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles((0..n).map(|i| FakeBundle::new("alice", i)).collect());
    let client = client_counting(&server.url(), "alice", "alicepw", HOUR);
    (server, client)
}

fn searches(server: &FakeCodaLab) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.path == "/rest/bundles")
        .map(|r| r.query)
        .collect()
}

fn alice_keywords() -> Vec<String> {
    staged_keywords(&[], "alice", None, false)
}

/// Fake server, 1,000 staged: one page of what the pools need, oldest first, then `.count`.
#[tokio::test]
async fn reads_what_the_pools_need_and_counts_the_rest() {
    let (server, client) = fake_with(1000).await;
    let result = client
        .staged_for(&alice_keywords(), &wants(11))
        .await
        .unwrap();
    assert_eq!(result.bundles.len(), 11);
    assert_eq!(result.bundles[0].uuid, FakeBundle::new("alice", 0).uuid);
    assert_eq!(
        (result.total, result.complete, result.requests),
        (1000, false, 2)
    );
    assert_eq!(
        searches(&server),
        [
            "worksheet=None&keywords=state%3Dstaged&keywords=.mine&keywords=.limit%3D11",
            "keywords=state%3Dstaged&keywords=.mine&keywords=.count",
        ]
    );
}

/// Fake server: the same bundles read again reuse the count (one request per tick); a queue
/// that moved is counted again (here at once: `CountEvery::moving` zero).
#[tokio::test]
async fn a_steady_queue_reuses_its_count_and_a_moving_one_is_counted_again() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles((0..100).map(|i| FakeBundle::new("alice", i)).collect());
    let every = CountEvery {
        moving: Duration::ZERO,
        ..HOUR
    };
    let client = client_counting(&server.url(), "alice", "alicepw", every);
    let first = client
        .staged_for(&alice_keywords(), &wants(1))
        .await
        .unwrap();
    assert_eq!(
        (first.bundles.len(), first.total, first.requests),
        (10, 100, 2)
    );
    let steady = client
        .staged_for(&alice_keywords(), &wants(1))
        .await
        .unwrap();
    assert_eq!((steady.total, steady.requests), (100, 1));
    // A worker took the oldest bundle.
    server.set_bundles((1..100).map(|i| FakeBundle::new("alice", i)).collect());
    let moved = client
        .staged_for(&alice_keywords(), &wants(1))
        .await
        .unwrap();
    assert_eq!((moved.total, moved.requests), (99, 2));
    assert_eq!(moved.bundles[0].uuid, FakeBundle::new("alice", 1).uuid);
}

/// Fake server: a queue that moved keeps its count for `CountEvery::moving`.
#[tokio::test]
async fn a_moving_queue_is_counted_at_most_every_fifteen_seconds() {
    let (server, client) = fake_with(100).await;
    assert_eq!(
        client
            .staged_for(&alice_keywords(), &wants(1))
            .await
            .unwrap()
            .requests,
        2
    );
    server.set_bundles((1..100).map(|i| FakeBundle::new("alice", i)).collect());
    let moved = client
        .staged_for(&alice_keywords(), &wants(1))
        .await
        .unwrap();
    assert_eq!(
        (moved.total, moved.requests),
        (100, 1),
        "the count of a moment ago"
    );
}

/// Fake server: with `CountEvery::ALWAYS` every read that stops short of the end counts.
#[tokio::test]
async fn counting_always_counts_every_read() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles((0..100).map(|i| FakeBundle::new("alice", i)).collect());
    let client = client_counting(&server.url(), "alice", "alicepw", CountEvery::ALWAYS);
    for _ in 0..2 {
        let read = client
            .staged_for(&alice_keywords(), &wants(1))
            .await
            .unwrap();
        assert_eq!((read.total, read.requests), (100, 2));
    }
}

/// Fake server with its default limit of 10: 25 staged, pools that take 25 get all 25 from one
/// short page, which also gives the total (no count).
#[tokio::test]
async fn twenty_five_staged_yield_twenty_five_when_the_pools_take_them() {
    let (server, client) = fake_with(25).await;
    let result = client
        .staged_for(&alice_keywords(), &wants(26))
        .await
        .unwrap();
    assert_eq!(result.bundles.len(), 25);
    assert_eq!(
        (result.total, result.complete, result.requests),
        (25, true, 1)
    );
    assert!(searches(&server)[0].ends_with("keywords=.limit%3D26"));
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn codalab_running() -> bool {
    Command::new("bash")
        .arg(repo().join("xtask/services/codalab/status.sh"))
        .env("SERVICES_DIR", repo().join(".services"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Stages `n` bundles as bob in `queue` with the project's staging helper; their uuids, oldest
/// first.
fn stage(n: usize, queue: &str) -> Vec<String> {
    let output = Command::new("bash")
        .arg(repo().join("xtask/services/codalab/stage.sh"))
        .args(["bob", &n.to_string(), "--request-queue", queue])
        .args(["--request-cpus", "1", "--request-memory", "256m"])
        .env("SERVICES_DIR", repo().join(".services"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "stage.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Removes bob's bundles (`DELETE /rest/bundles?force=1`).
async fn remove(server: &str, uuids: &[String]) {
    let http = reqwest::Client::new();
    let token: serde_json::Value = http
        .post(format!("{server}/rest/oauth2/token"))
        .basic_auth("codalab_cli_client", Some(""))
        .form(&[
            ("grant_type", "password"),
            ("username", "bob"),
            ("password", "bobpw"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let data: Vec<serde_json::Value> = uuids
        .iter()
        .map(|u| serde_json::json!({"id": u, "type": "bundles"}))
        .collect();
    let reply = http
        .delete(format!("{server}/rest/bundles?force=1"))
        .header("X-Requested-With", "XMLHttpRequest")
        .bearer_auth(token["access_token"].as_str().unwrap())
        .json(&serde_json::json!({ "data": data }))
        .send()
        .await
        .unwrap();
    assert!(
        reply.status().is_success(),
        "{}",
        reply.text().await.unwrap()
    );
}

/// REAL CodaLab 1.7.5 server (default limit 10): 25 staged bundles are all read when the pools
/// take 25 (one page, no count), and a need of 11 reads the 11 oldest and counts 25; the read
/// is oldest first; the same read again reuses the count.
#[tokio::test]
async fn real_server_pages_by_need_oldest_first_and_counts() {
    if !require_service("codalab", codalab_running()) {
        return;
    }
    let queue = format!("staged-search-{}", std::process::id());
    let staged = stage(25, &queue);
    let server = "http://127.0.0.1:2900";
    let client = client_counting(server, "bob", "bobpw", HOUR);
    let keywords = staged_keywords(&[], "bob", Some(&queue), true);
    let all = client.staged_for(&keywords, &wants(26)).await;
    let some = client.staged_for(&keywords, &wants(11)).await;
    let again = client.staged_for(&keywords, &wants(11)).await;
    let every = client.search_bundles(&keywords).await;
    remove(server, &staged).await;
    let uuids =
        |bundles: &[StagedBundle]| bundles.iter().map(|b| b.uuid.clone()).collect::<Vec<_>>();
    let all = all.unwrap();
    assert_eq!(uuids(&all.bundles), staged, "all 25, oldest first");
    assert_eq!((all.total, all.complete, all.requests), (25, true, 1));
    let some = some.unwrap();
    assert_eq!(uuids(&some.bundles), staged[..11]);
    assert_eq!((some.total, some.complete, some.requests), (25, false, 2));
    let again = again.unwrap();
    assert_eq!(
        (again.total, again.requests),
        (25, 1),
        "the count is reused"
    );
    assert_eq!(uuids(&every.unwrap().bundles), staged);
}
