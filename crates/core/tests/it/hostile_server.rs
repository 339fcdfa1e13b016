//! The CodaLab client against a hostile server (issue 22): redirects to another origin, JSON
//! nested 100,000 deep, bodies that never end or announce 100 MB, and a 401 to the search.
//! Each test drives the real client over HTTP on 127.0.0.1.

use crate::hostile::{
    Hostile, Reply, Request, deeply_nested, token_reply, user_reply, well_behaved,
};
use codalab_wm_core::Error;
use codalab_wm_core::codalab::{CodaLabClient, staged_keywords};
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};

const PASSWORD: &str = "s3cret-pw-issue22";

fn client(server: &str) -> CodaLabClient {
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new(PASSWORD),
    };
    CodaLabClient::new(server, credentials).unwrap()
}

fn keywords() -> Vec<String> {
    staged_keywords(&[], "alice", None, false)
}

fn path(request: &Request) -> &str {
    request.path.split('?').next().unwrap_or_default()
}

/// Answers like `well_behaved`, but `path` gets `reply`.
fn hostile_on(
    target: &'static str,
    reply: Reply,
) -> impl Fn(&Request) -> Reply + Send + Sync + 'static {
    move |request| {
        if path(request) == target {
            reply.clone()
        } else {
            well_behaved(request)
        }
    }
}

#[tokio::test]
async fn the_password_never_follows_a_redirect_to_another_origin() {
    for status in [307, 308] {
        let elsewhere = Hostile::start(well_behaved).await;
        let location = format!("{}/rest/oauth2/token", elsewhere.url());
        let server = Hostile::start(hostile_on(
            "/rest/oauth2/token",
            Reply::redirect(status, &location),
        ))
        .await;
        let error = client(&server.url()).login().await.unwrap_err();
        assert!(
            elsewhere.requests().is_empty(),
            "{status}: the login followed the redirect: {:?}",
            elsewhere.requests()
        );
        let text = error.to_string();
        assert!(error.is_fatal(), "{status}: {text}");
        assert!(text.contains("redirected the login"), "{text}");
        assert!(text.contains(&elsewhere.url()), "{text}");
        assert!(!text.contains(PASSWORD), "{text}");
    }
}

#[tokio::test]
async fn the_token_never_follows_a_redirect_to_another_origin() {
    let elsewhere = Hostile::start(well_behaved).await;
    let location = format!("{}/rest/bundles", elsewhere.url());
    let server = Hostile::start(hostile_on("/rest/bundles", Reply::redirect(302, &location))).await;
    let error = client(&server.url())
        .search_bundles(&keywords())
        .await
        .unwrap_err();
    assert!(
        elsewhere.requests().is_empty(),
        "{:?}",
        elsewhere.requests()
    );
    let text = error.to_string();
    assert!(text.contains("another origin"), "{text}");
    assert!(error.is_fatal(), "{text}");
}

#[tokio::test]
async fn a_same_origin_redirect_of_the_search_is_followed() {
    let server = Hostile::start(|request: &Request| {
        if request.path.starts_with("/rest/bundles?") {
            let moved = request.path.replacen("/rest/bundles", "/rest/bundles/", 1);
            return Reply::redirect(307, &moved);
        }
        well_behaved(request)
    })
    .await;
    let result = client(&server.url()).search_bundles(&keywords()).await;
    assert!(result.unwrap().bundles.is_empty());
}

/// 100,000 nested arrays in an unknown member: refused as an invalid reply (temporary), the
/// process does not overflow its stack (which aborts the test binary on the old code).
#[tokio::test]
async fn a_deeply_nested_reply_is_refused_on_every_parse_path() {
    let deep = |prefix: &str, depth| deeply_nested(prefix, depth, "}");
    // The token reply is capped at 64 KiB: 30,000 deep fits.
    let cases = [
        ("/rest/bundles", deep(r#"{"data": [], "x": "#, 100_000)),
        (
            "/rest/oauth2/token",
            deep(r#"{"access_token": "t", "x": "#, 30_000),
        ),
        (
            "/rest/user",
            deep(
                r#"{"data": {"attributes": {"user_name": "alice"}}, "x": "#,
                100_000,
            ),
        ),
    ];
    for (target, body) in cases {
        let server = Hostile::start(hostile_on(target, Reply::json(200, body))).await;
        let error = client(&server.url())
            .search_bundles(&keywords())
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(
            matches!(error, Error::InvalidReply { .. }),
            "{target}: {text}"
        );
        assert!(text.contains("nested deeper than 127"), "{target}: {text}");
    }
}

#[tokio::test]
async fn an_endless_reply_fails_at_the_cap() {
    let cases = [
        ("/rest/bundles", r#"{"data": ["#, "32 MiB"),
        ("/rest/oauth2/token", r#"{"access_token": ""#, "64 KiB"),
        ("/rest/user", r#"{"data": "#, "1 MiB"),
    ];
    for (target, prefix, cap) in cases {
        let reply = Reply::Endless {
            prefix: prefix.into(),
        };
        let server = Hostile::start(hostile_on(target, reply)).await;
        let error = client(&server.url())
            .search_bundles(&keywords())
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains(&format!("reply body larger than the limit of {cap}")),
            "{target}: {text}"
        );
    }
}

#[tokio::test]
async fn an_oversize_reply_is_refused_from_its_announced_length() {
    let reply = Reply::Announced { length: 100 << 20 };
    let server = Hostile::start(hostile_on("/rest/bundles", reply)).await;
    let error = client(&server.url())
        .search_bundles(&keywords())
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("reply body larger than the limit of 32 MiB"),
        "{text}"
    );
}

/// A search answered 401 (a dead token) logs in again once and searches again, instead of
/// keeping the token until the scheduled refresh.
#[tokio::test]
async fn a_search_answered_401_logs_in_again_and_retries() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(vec![FakeBundle::new("alice", 1)]);
    let client = client_for_fake(&server);
    assert_eq!(
        client
            .search_bundles(&keywords())
            .await
            .unwrap()
            .bundles
            .len(),
        1
    );
    server.inject_faults(vec![(401, "User is not authenticated.".into())]);
    let result = client.search_bundles(&keywords()).await;
    assert_eq!(result.unwrap().bundles.len(), 1);
    let logins = server
        .requests()
        .iter()
        .filter(|r| r.path == "/rest/oauth2/token")
        .count();
    assert_eq!(logins, 2, "one login at start, one after the 401");
}

fn client_for_fake(server: &FakeCodaLab) -> CodaLabClient {
    crate::fixtures::alice_client(&server.url())
}

#[tokio::test]
async fn well_formed_replies_still_work() {
    let server = Hostile::start(|request: &Request| match path(request) {
        "/rest/oauth2/token" => token_reply(),
        "/rest/user" => user_reply(),
        _ => Reply::json(200, r#"{"data": []}"#),
    })
    .await;
    assert!(
        client(&server.url())
            .search_bundles(&keywords())
            .await
            .unwrap()
            .bundles
            .is_empty()
    );
}

/// A 100 KB `--worker-tag` with `--worker-tag-exclusive` makes a search URL the real server
/// refuses (gunicorn: `400 Request Line is too large`, or a reset connection): a clear fatal
/// error naming the flag, and nothing sent.
#[tokio::test]
async fn a_search_url_longer_than_the_server_accepts_is_a_clear_fatal_error() {
    let server = Hostile::start(well_behaved).await;
    let tag = "t".repeat(100_000);
    let keywords = staged_keywords(&[], "alice", Some(&tag), true);
    let error = client(&server.url())
        .search_bundles(&keywords)
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(error.is_fatal(), "{text}");
    assert!(text.contains("--worker-tag"), "{text}");
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.path.starts_with("/rest/bundles")),
        "the search was sent"
    );
    // A usual tag is fine.
    let keywords = staged_keywords(&[], "alice", Some("gpu-queue-1"), true);
    client(&server.url())
        .search_bundles(&keywords)
        .await
        .unwrap();
}

/// Once the client has worked, a refused redirect is temporary (a maintenance redirect must
/// not stop the manager): retried later, and still nothing sent to the other origin.
#[tokio::test]
async fn a_redirect_elsewhere_after_a_good_start_is_temporary() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let elsewhere = Hostile::start(well_behaved).await;
    let location = format!("{}/maintenance", elsewhere.url());
    let searches = AtomicUsize::new(0);
    let server = Hostile::start(move |request: &Request| {
        if path(request) == "/rest/bundles" && searches.fetch_add(1, Ordering::Relaxed) > 0 {
            return Reply::redirect(302, &location);
        }
        well_behaved(request)
    })
    .await;
    let client = client(&server.url());
    client.search_bundles(&keywords()).await.unwrap();
    let error = client.search_bundles(&keywords()).await.unwrap_err();
    let text = error.to_string();
    assert!(error.is_temporary(), "{text}");
    assert!(text.contains("another origin"), "{text}");
    assert!(elsewhere.requests().is_empty());
}

#[tokio::test]
async fn a_reply_cut_short_names_the_server() {
    // 2 MiB announced, 1 MiB sent, then the connection closes: the body read fails.
    let reply = Reply::Announced { length: 2 << 20 };
    let server = Hostile::start(hostile_on("/rest/bundles", reply)).await;
    let error = client(&server.url())
        .search_bundles(&keywords())
        .await
        .unwrap_err();
    assert!(error.is_temporary(), "{error}");
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("codalab server {} unreachable", server.url())),
        "{text}"
    );
}
