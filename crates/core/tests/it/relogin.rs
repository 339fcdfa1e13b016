//! A refused re-login (#40, review §11), against the in-process fake CodaLab: once the
//! manager has logged in, a spell in which the token endpoint refuses its credentials (401
//! `invalid_grant`: a proxy's maintenance page, an auth backend down) is retried like an
//! outage (the tick fails, `/healthz` reads the failure from the status, a
//! `server_unreachable` event quotes it),
//! and the manager goes on when the spell ends; only a refusal that lasts past the bound ends
//! it. Ticks are driven one by one; no sleeping.

use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::secret::{Credentials, Secret};
use codalab_wm_core::testing::FakeBackend;
use codalab_wm_core::{Manager, ManagerConfig, Pool, PoolPolicy, WorkerOptions, WorkerShape};
use codalab_wm_fake_codalab::FakeCodaLab;
use std::sync::Arc;
use std::time::Duration;

fn manager(server: &FakeCodaLab, password: &str) -> Manager {
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new(password),
    };
    let client = CodaLabClient::new(&server.url(), credentials).unwrap();
    let shape = WorkerShape::from_flags(1, 0, 8192);
    let pool = Pool {
        policy: PoolPolicy::new("cpu", shape),
        backend: Arc::new(FakeBackend::new(shape)),
        worker: WorkerOptions {
            server: server.url(),
            ..WorkerOptions::default()
        },
    };
    let config = ManagerConfig {
        sleep_time: Duration::ZERO,
        max_backoff: Duration::from_millis(100),
        ..ManagerConfig::default()
    };
    Manager::with_pools(config, client, vec![pool]).unwrap()
}

/// The server revokes the manager's token and refuses every login for a spell: each tick of
/// the spell fails without ending the manager (no fatal error), its status carries the error
/// (`/healthz` degrades from it) and a `server_unreachable` event; after the spell the next tick
/// logs in again and succeeds.
#[tokio::test]
async fn a_refused_relogin_is_retried_and_the_manager_recovers() {
    let server = FakeCodaLab::start().await.unwrap();
    let mut manager = manager(&server, "alicepw");
    manager.tick().await.expect("logged in");
    server.revoke_tokens();
    server.refuse_logins(true);
    let mut refused = 0;
    for _ in 0..4 {
        let error = manager.tick().await.expect_err("the server refuses us");
        assert!(
            !error.is_fatal(),
            "one refused re-login ends the manager: {error}"
        );
        refused += usize::from(error.to_string().contains("refused the credentials"));
        manager.advance_clock(Duration::from_secs(60));
    }
    assert!(refused > 0, "the refusal is named");
    let status = manager.status();
    assert!(
        status
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("refused")),
        "{:?}",
        status.last_error
    );
    let refusal = status
        .events
        .iter()
        .find(|e| e.kind.code() == "server_unreachable")
        .expect("an event says so");
    assert!(refusal.kind.to_string().contains("refused"), "{refusal:?}");
    server.refuse_logins(false);
    manager.tick().await.expect("the spell is over");
    let status = manager.status();
    assert!(status.last_error.is_none());
    assert!(status.events.iter().any(|e| e.kind.code() == "server_back"));
}

/// A wrong password at the first login stays fatal at once.
#[tokio::test]
async fn a_refusal_before_the_first_success_is_fatal() {
    let server = FakeCodaLab::start().await.unwrap();
    let mut manager = manager(&server, "wrong");
    let error = manager.tick().await.expect_err("refused");
    assert!(error.is_fatal(), "{error}");
}

/// A refusal that outlasts the bound ends `Manager::run` with the fatal error of a wrong
/// password (the CLI's status 1); the bound is set to zero here, so the first refusal is
/// past it (the default is `REFUSED_AGAIN_FOR`, 30 minutes).
#[tokio::test]
async fn a_refusal_past_the_bound_ends_the_run() {
    let server = FakeCodaLab::start().await.unwrap();
    let mut manager = manager(&server, "alicepw");
    manager.tick().await.expect("logged in");
    server.revoke_tokens();
    server.refuse_logins(true);
    manager.refuse_again_for(Duration::ZERO);
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let error = manager
        .run(false, shutdown)
        .await
        .expect_err("refused for good");
    assert!(
        matches!(error, codalab_wm_core::Error::Unauthenticated { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("though accepted before"),
        "{error}"
    );
}
