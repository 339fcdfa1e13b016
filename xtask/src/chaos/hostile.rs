//! The "hostile server" scenario (issue 22): mid-run, CodaLab (through the proxy) redirects
//! to another origin, sends a search reply nested 100,000 deep, one that never ends, and
//! answers 401 to the search. The manager must skip those ticks with a clear reason, log in
//! again after the 401, never send anything to the other origin, never write the password
//! into its logs, never crash, and never run more than `--max-workers` jobs.

use super::harness::{self, MAX_WORKERS, is_skipped_tick, wait_for_jobs};
use super::scenarios::{Findings, Setup};
use crate::proxy::Fault;
use anyhow::{Result, ensure};
use std::io::Read;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

const RECOVER: Duration = Duration::from_secs(40);

/// A listener on 127.0.0.1 that counts the connections it gets (the "other origin").
struct Catcher {
    url: String,
    connections: Arc<AtomicU64>,
}

impl Catcher {
    fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let connections = Arc::new(AtomicU64::new(0));
        let counted = connections.clone();
        // Runs until the process ends; it only counts and reads.
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::Relaxed);
                let mut stream = stream;
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = stream.read(&mut [0u8; 4096]);
            }
        });
        Ok(Self { url, connections })
    }
}

/// The faults, each with the text its skipped tick must give.
fn faults(catcher: &Catcher) -> Vec<(Fault, Option<&'static str>, &'static str)> {
    let deep = format!(
        "{{\"data\": [], \"x\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    vec![
        (
            Fault::Redirect {
                status: 307,
                location: format!("{}/rest/bundles", catcher.url),
            },
            None,
            "another origin",
        ),
        (
            Fault::Reply {
                status: 200,
                content_type: "application/json",
                body: deep,
            },
            Some("/rest/bundles"),
            "nested deeper than",
        ),
        (
            Fault::Endless,
            Some("/rest/bundles"),
            "larger than the limit",
        ),
    ]
}

pub fn hostile_server(setup: &Setup) -> Result<Findings> {
    let mut findings = Findings::default();
    let catcher = Catcher::start()?;
    let mut manager = setup.spec.spawn("hostile-server")?;
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    for (fault, scope, expected) in faults(&catcher) {
        let label = fault.label();
        let cursor = manager.cursor();
        let before = setup.proxy.faulted();
        match scope {
            Some(scope) => setup.proxy.set_scoped(fault, scope),
            None => setup.proxy.set(fault),
        }
        let skipped = manager.wait_for_event(
            cursor,
            Duration::from_secs(30),
            &format!("tick skipped ({label})"),
            is_skipped_tick,
        )?;
        setup.proxy.set(Fault::Pass);
        findings.faults += setup.proxy.faulted() - before;
        let error = skipped.get("error").unwrap_or_default().to_owned();
        ensure!(
            error.contains(expected),
            "{label}: the skipped tick does not say `{expected}`: {error}"
        );
        ensure!(manager.alive()?, "manager gone after {label}");
        wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
        findings.notes.push(format!("{label}: `{}`", short(&error)));
    }
    // A 401 to the search: the manager logs in again instead of keeping the dead token.
    let cursor = manager.cursor();
    let before = setup.proxy.faulted();
    let unauthorized = Fault::Reply {
        status: 401,
        content_type: "text/plain",
        body: "User is not authenticated.".into(),
    };
    setup.proxy.set_scoped(unauthorized, "/rest/bundles");
    let relogin =
        manager.wait_for_event(cursor, Duration::from_secs(30), "logging in again", |e| {
            e.message().contains("logging in again")
        });
    setup.proxy.set(Fault::Pass);
    let relogin = relogin?;
    findings.faults += setup.proxy.faulted() - before;
    wait_for_jobs(&mut manager, &setup.spec.job_name, MAX_WORKERS, RECOVER)?;
    findings.notes.push(format!("401: `{}`", relogin.message()));
    manager.stop()?;
    ensure!(
        catcher.connections.load(Ordering::Relaxed) == 0,
        "the manager followed a redirect to another origin"
    );
    let log = std::fs::read_to_string(&manager.log).unwrap_or_default();
    ensure!(
        !log.contains(harness::PASSWORD),
        "the password is in the log"
    );
    findings
        .notes
        .push("other origin contacted 0 times; password not in the log".into());
    Ok(findings)
}

fn short(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 110 {
        return text.to_owned();
    }
    let tail: String = chars[chars.len() - 100..].iter().collect();
    format!("… {tail}")
}
