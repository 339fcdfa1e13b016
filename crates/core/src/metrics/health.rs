//! The `/healthz` rule: a manager is healthy when its last successful tick is at most 3 ×
//! `sleep_time` ago. [`Health`] follows the status snapshots and answers with the reason, in
//! the words `/healthz` serves.

use crate::manager::status::Status;
use std::time::{Duration, Instant};

/// When a tick last succeeded, and the limit it is held to.
#[derive(Debug, Clone)]
pub struct Health {
    /// 3 × `sleep_time`.
    limit: Duration,
    started: Instant,
    last_success: Option<Instant>,
}

impl Health {
    /// A manager started at `started` that ticks every `sleep_time`.
    pub fn new(sleep_time: Duration, started: Instant) -> Self {
        Self {
            limit: sleep_time * 3,
            started,
            last_success: None,
        }
    }

    /// Takes in a snapshot seen at `now`; `new_tick` when it reports a tick not seen before
    /// ([`StatusExporter::observe`](super::StatusExporter::observe)), so that seeing the same
    /// snapshot again does not count as a success.
    pub fn observe(&mut self, new_tick: bool, status: &Status, now: Instant) {
        if new_tick && status.last_error.is_none() {
            self.last_success = Some(now);
        }
    }

    /// `Ok` (healthy) or `Err` (unhealthy), with the text `/healthz` answers; `last_error` is
    /// the last snapshot's error, which an unhealthy answer quotes.
    pub fn check(&self, last_error: Option<&str>, now: Instant) -> Result<String, String> {
        let limit = self.limit.as_secs();
        let error = last_error.map(|e| format!(": {e}")).unwrap_or_default();
        match self.last_success {
            Some(at) if now.duration_since(at) <= self.limit => Ok(format!(
                "ok: last successful tick {} s ago (limit {limit} s)\n",
                now.duration_since(at).as_secs()
            )),
            Some(at) => Err(format!(
                "last successful tick {} s ago (limit {limit} s){error}\n",
                now.duration_since(at).as_secs()
            )),
            None => Err(format!(
                "no successful tick yet (started {} s ago, limit {limit} s){error}\n",
                now.duration_since(self.started).as_secs()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_until_three_sleep_times_after_the_last_success() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut health = Health::new(s(5), t0);
        assert_eq!(
            health.check(Some("refused"), t0 + s(2)),
            Err("no successful tick yet (started 2 s ago, limit 15 s): refused\n".into())
        );
        let failed = Status {
            last_error: Some("refused".into()),
            ..Status::default()
        };
        health.observe(true, &failed, t0);
        assert!(
            health.check(None, t0).is_err(),
            "a failed tick is no success"
        );
        health.observe(false, &Status::default(), t0);
        assert!(
            health.check(None, t0).is_err(),
            "a snapshot seen before is no tick"
        );
        health.observe(true, &Status::default(), t0);
        assert_eq!(
            health.check(None, t0 + s(15)),
            Ok("ok: last successful tick 15 s ago (limit 15 s)\n".into())
        );
        assert_eq!(
            health.check(Some("unreachable"), t0 + s(16)),
            Err("last successful tick 16 s ago (limit 15 s): unreachable\n".into())
        );
    }
}
