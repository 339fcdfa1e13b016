//! The "refused re-login" scenario (issue 40, review 2026-11-27 §11): mid-run, the manager's
//! tokens are revoked in MariaDB, so its next call needs a new login, and the token endpoint
//! (through the proxy) answers that login with a 401, a 400 `invalid_grant` or a 503 for a
//! spell. A manager that has logged in before must ride each spell out: stay alive, launch
//! nothing (it has no fresh view), keep the jobs it has, and log in again once the spell ends.

use super::harness::{self, MAX_WORKERS, hold_jobs, is_tick, wait_for_jobs};
use super::scenarios::{Findings, Setup};
use crate::proxy::Fault;
use anyhow::{Result, ensure};
use std::time::Duration;

const RECOVER: Duration = Duration::from_secs(60);

/// How long each refusal lasts: several of the manager's retries, well inside its bound.
const SPELL: Duration = Duration::from_secs(10);

/// The token endpoint's refusals, as a proxy, a maintenance page or a busy user table give them.
fn refusals() -> [Fault; 3] {
    [
        Fault::Reply {
            status: 401,
            content_type: "text/html",
            body: "<html><body><h1>401 Authorization Required</h1></body></html>".into(),
        },
        Fault::Reply {
            status: 400,
            content_type: "application/json",
            body:
                r#"{"error": "invalid_grant", "error_description": "Invalid credentials given."}"#
                    .into(),
        },
        Fault::Reply {
            status: 503,
            content_type: "text/plain",
            body: "Service Unavailable".into(),
        },
    ]
}

/// Each refusal in turn, on an established manager.
pub fn relogin_refused(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    // Every token issued after this one is the manager's (each spell revokes them all).
    let before_token = harness::newest_token_id()?;
    let mut manager = setup.spec.spawn("relogin-refused")?;
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    for refusal in refusals() {
        let before = setup.proxy.faulted();
        setup
            .proxy
            .set_scoped(refusal.clone(), "/rest/oauth2/token");
        let deleted = harness::revoke_tokens(before_token)?;
        ensure!(deleted > 0, "no token of the user was in the database");
        // Through the spell: alive, and not one launch (every job stays).
        hold_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, SPELL)?;
        let refused = setup.proxy.faulted() - before;
        ensure!(
            refused > 0,
            "the manager never asked for a token during the {} spell",
            refusal.label()
        );
        let cursor = manager.cursor();
        setup.proxy.set(Fault::Pass);
        // Back: it logs in and ticks again with the right view of the queue.
        let tick = manager.wait_for_event(cursor, RECOVER, "a tick after the spell", is_tick)?;
        ensure!(
            tick.number("staged") == Some(setup.staged as u64),
            "the first tick after the {} spell saw {:?} staged, not {}",
            refusal.label(),
            tick.number("staged"),
            setup.staged
        );
        findings.faults += refused;
        findings.notes.push(format!(
            "{}: {refused} logins refused over {} s, ticking again after",
            refusal.label(),
            SPELL.as_secs()
        ));
    }
    manager.stop()?;
    Ok(findings)
}
