//! What `/healthz` says: whether the operator still works, not only whether it runs. It is
//! 503 (so the liveness probe restarts the replica) when the pool watcher has not listed the
//! pools since start, or has failed without a success since, for longer than the watch limit,
//! or when the Lease loop has not finished a round for longer than the lease limit (each
//! round is bounded, so a stuck loop is a dead one). The HTTP side is `health_server.rs`.

use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The operator's vital signs, written by the pool watcher and the Lease loop.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    limits: Limits,
    state: Mutex<State>,
}

/// How long each part may go without a sign of life.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The pool watcher: from start to its first complete list, and from a failure to the
    /// next success.
    pub watch: Duration,
    /// The Lease loop: between two finished rounds.
    pub lease: Duration,
}

#[derive(Debug, Default)]
struct State {
    listed: bool,
    failing: Option<(Instant, String)>,
    lease_round: Option<Instant>,
}

impl Health {
    /// A new record, the clocks starting `now`.
    pub fn new(limits: Limits, now: Instant) -> Self {
        Self {
            started: now,
            limits,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pool watcher listed every pool.
    pub fn pools_listed(&self) {
        let mut state = self.state();
        state.listed = true;
        state.failing = None;
    }

    /// The pool watcher delivered an event.
    pub fn pools_ok(&self) {
        self.state().failing = None;
    }

    /// The pool watcher failed at `now` with `error` (the first failure of a streak counts).
    pub fn pools_failed(&self, error: &str, now: Instant) {
        let mut state = self.state();
        match &mut state.failing {
            Some((_, last)) => *last = error.to_owned(),
            None => state.failing = Some((now, error.to_owned())),
        }
    }

    /// The Lease loop finished a round at `now`.
    pub fn lease_round(&self, now: Instant) {
        self.state().lease_round = Some(now);
    }

    /// `Ok` when healthy at `now`, else what is wrong.
    pub fn verdict(&self, now: Instant) -> Result<(), String> {
        let state = self.state();
        let since = |t: Instant| now.saturating_duration_since(t);
        if let Some((from, error)) = &state.failing
            && since(*from) > self.limits.watch
        {
            let seconds = since(*from).as_secs();
            return Err(format!(
                "the pool watcher has failed for {seconds} s: {error}"
            ));
        }
        if !state.listed && since(self.started) > self.limits.watch {
            let seconds = since(self.started).as_secs();
            return Err(format!(
                "the pool watcher has not listed the pools in {seconds} s"
            ));
        }
        let last_round = state.lease_round.unwrap_or(self.started);
        if since(last_round) > self.limits.lease {
            let seconds = since(last_round).as_secs();
            return Err(format!(
                "the lease loop has not finished a round in {seconds} s"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_follows_the_watcher_and_the_lease_loop() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let limits = Limits {
            watch: s(60),
            lease: s(30),
        };
        let health = Health::new(limits, t0);
        let verdict = |at: u64| health.verdict(t0 + s(at));
        // Starting: some time to list and to renew.
        assert_eq!(verdict(20), Ok(()));
        health.lease_round(t0 + s(20));
        assert!(
            verdict(61)
                .unwrap_err()
                .contains("has not listed the pools in 61 s")
        );
        health.pools_listed();
        health.lease_round(t0 + s(60));
        assert_eq!(verdict(61), Ok(()));
        // One bad pool used to fail the whole list forever (review §5.3): a failure that lasts.
        health.pools_failed("list: invalid value", t0 + s(70));
        health.lease_round(t0 + s(100));
        assert_eq!(verdict(120), Ok(()));
        health.pools_failed("list: still invalid", t0 + s(125));
        let failing = verdict(131).unwrap_err();
        assert!(
            failing.contains("failed for 61 s: list: still invalid"),
            "{failing}"
        );
        health.pools_ok();
        health.lease_round(t0 + s(130));
        assert_eq!(verdict(131), Ok(()));
        // A Lease loop that stopped finishing rounds.
        let stuck = verdict(161).unwrap_err();
        assert!(
            stuck.contains("lease loop has not finished a round in 31 s"),
            "{stuck}"
        );
    }
}
