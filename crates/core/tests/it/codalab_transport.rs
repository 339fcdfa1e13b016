//! Transport tests of the CodaLab client against an in-process HTTP server
//! (`codalab_wm_fake_codalab`) that answers like the real CodaLab 1.7.5 server recorded in
//! `tests/samples/`: OAuth2 token grants, `/rest/user`, the bundle search with its default
//! limit of 10, plain-text error bodies, and anonymous answers to invalid tokens.

use codalab_wm_core::Error;
use codalab_wm_core::codalab::{ClientOptions, CodaLabClient, staged_keywords};
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_fake_codalab::{FakeBundle, FakeCodaLab};

fn alice(password: &str) -> Credentials {
    Credentials {
        username: "alice".into(),
        password: Secret::new(password),
    }
}

fn bundles(owner: &str, range: std::ops::Range<u64>) -> Vec<FakeBundle> {
    range.map(|n| FakeBundle::new(owner, n)).collect()
}

fn keywords() -> Vec<String> {
    staged_keywords(&[], "alice", None, false)
}

#[tokio::test]
async fn sees_every_staged_bundle_beyond_the_default_limit_of_ten() {
    let server = FakeCodaLab::start().await.unwrap();
    let mut all = bundles("alice", 0..25);
    all.extend(bundles("codalab", 100..103));
    server.set_bundles(all);
    let client = CodaLabClient::new(&server.url(), alice("alicepw")).unwrap();
    let result = client.search_bundles(&keywords()).await.unwrap();
    assert_eq!(
        result.bundles.len(),
        25,
        "only alice's bundles, all of them"
    );
    assert!(
        result
            .bundles
            .iter()
            .all(|b| b.owner.as_deref() == Some("alice"))
    );
    let search = server
        .requests()
        .into_iter()
        .find(|r| r.path == "/rest/bundles")
        .unwrap();
    assert_eq!(
        search.query,
        "worksheet=None&keywords=state%3Dstaged&keywords=.mine&keywords=.limit%3D1000"
    );
}

#[tokio::test]
async fn pages_through_large_results() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(bundles("alice", 0..10));
    let options = ClientOptions {
        search_page_size: 4,
        ..ClientOptions::default()
    };
    let client = CodaLabClient::with_options(&server.url(), alice("alicepw"), &options).unwrap();
    let result = client.search_bundles(&keywords()).await.unwrap();
    assert_eq!(result.bundles.len(), 10);
    let searches: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.path == "/rest/bundles")
        .map(|r| r.query)
        .collect();
    assert_eq!(searches.len(), 3);
    assert!(
        searches[1].ends_with("keywords=.limit%3D4&keywords=.offset%3D4"),
        "{}",
        searches[1]
    );
    assert!(
        searches[2].ends_with("keywords=.offset%3D8"),
        "{}",
        searches[2]
    );
}

#[tokio::test]
async fn a_bundle_on_two_pages_is_seen_once_in_order() {
    // Offset paging while the staged set shifts: bundle 3 ends page 1 and starts page 2.
    let server = FakeCodaLab::start().await.unwrap();
    let mut all = bundles("alice", 0..4);
    all.extend(bundles("alice", 3..6));
    server.set_bundles(all);
    let options = ClientOptions {
        search_page_size: 4,
        ..ClientOptions::default()
    };
    let client = CodaLabClient::with_options(&server.url(), alice("alicepw"), &options).unwrap();
    let result = client.search_bundles(&keywords()).await.unwrap();
    let expected: Vec<String> = bundles("alice", 0..6).into_iter().map(|b| b.uuid).collect();
    let seen: Vec<String> = result.bundles.into_iter().map(|b| b.uuid).collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn a_wrong_password_is_a_clear_fatal_error() {
    let server = FakeCodaLab::start().await.unwrap();
    let client = CodaLabClient::new(&server.url(), alice("wrong")).unwrap();
    let err = client.search_bundles(&keywords()).await.unwrap_err();
    assert!(matches!(err, Error::Unauthenticated { .. }), "{err:?}");
    assert!(err.is_fatal());
    assert_eq!(
        err.to_string(),
        format!(
            "codalab server {} refused the credentials of user `alice`: Invalid credentials given. (invalid_grant)",
            server.url()
        )
    );
}

#[tokio::test]
async fn server_errors_carry_status_and_first_line_and_are_temporary() {
    let server = FakeCodaLab::start().await.unwrap();
    let client = CodaLabClient::new(&server.url(), alice("alicepw")).unwrap();
    client.login().await.unwrap();
    server.inject_faults(vec![(
        500,
        "Unexpected Internal Error (boom).\nTraceback (most recent call last): ...".into(),
    )]);
    let err = client.search_bundles(&keywords()).await.unwrap_err();
    assert!(err.is_temporary());
    assert_eq!(
        err.to_string(),
        "codalab server answered 500 to staged bundle search: Unexpected Internal Error (boom)."
    );
    server.inject_faults(vec![(
        400,
        "<html><body><pre>?include=bogus not supported</pre></body></html>".into(),
    )]);
    let err = client.search_bundles(&keywords()).await.unwrap_err();
    assert!(!err.is_temporary());
    assert!(
        err.to_string().ends_with(": ?include=bogus not supported"),
        "{err}"
    );
}

#[tokio::test]
async fn a_revoked_token_is_noticed_and_replaced_instead_of_reading_zero_bundles() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(bundles("alice", 0..3));
    let client = CodaLabClient::new(&server.url(), alice("alicepw")).unwrap();
    assert_eq!(
        client
            .search_bundles(&keywords())
            .await
            .unwrap()
            .bundles
            .len(),
        3
    );
    server.revoke_tokens();
    // The server now answers as anonymous: `.mine` matches nothing. The client must notice.
    let result = client.search_bundles(&keywords()).await.unwrap();
    assert_eq!(result.bundles.len(), 3);
    let logins = server
        .requests()
        .iter()
        .filter(|r| r.path == "/rest/oauth2/token")
        .count();
    assert_eq!(logins, 2, "logged in again after the identity check failed");
    let identity_checks = server
        .requests()
        .iter()
        .filter(|r| r.path == "/rest/user")
        .count();
    assert_eq!(
        identity_checks, 3,
        "after each login and once on the suspicious empty result"
    );
}

#[tokio::test]
async fn an_empty_result_with_a_valid_token_is_believed() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_bundles(bundles("alice", 0..2));
    let client = CodaLabClient::new(&server.url(), alice("alicepw")).unwrap();
    assert_eq!(
        client
            .search_bundles(&keywords())
            .await
            .unwrap()
            .bundles
            .len(),
        2
    );
    server.set_bundles(vec![]);
    assert!(
        client
            .search_bundles(&keywords())
            .await
            .unwrap()
            .bundles
            .is_empty()
    );
    let logins = server
        .requests()
        .iter()
        .filter(|r| r.path == "/rest/oauth2/token")
        .count();
    assert_eq!(logins, 1);
}

#[tokio::test]
async fn tokens_near_expiry_are_refreshed() {
    let server = FakeCodaLab::start().await.unwrap();
    server.set_token_lifetime(0);
    server.set_bundles(bundles("alice", 0..1));
    let client = CodaLabClient::new(&server.url(), alice("alicepw")).unwrap();
    for _ in 0..3 {
        assert_eq!(
            client
                .search_bundles(&keywords())
                .await
                .unwrap()
                .bundles
                .len(),
            1
        );
    }
    let grants = server
        .requests()
        .iter()
        .filter(|r| r.path == "/rest/oauth2/token")
        .count();
    assert_eq!(
        grants, 3,
        "one login, then a refresh before each later search"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_temporary_error_that_says_why() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = CodaLabClient::new(&url, alice("alicepw")).unwrap();
    let err = client.search_bundles(&keywords()).await.unwrap_err();
    assert!(err.is_temporary());
    assert!(err.to_string().contains("Connection refused"), "{err}");
}

#[tokio::test]
async fn the_secret_never_shows_in_errors() {
    let server = FakeCodaLab::start().await.unwrap();
    let client = CodaLabClient::new(&server.url(), alice("s3cr3t-value")).unwrap();
    let err = client.login().await.unwrap_err();
    assert!(!format!("{err} {err:?} {client:?}").contains("s3cr3t-value"));
}
