//! The `/healthz` and `/livez` rules. A manager is healthy (ready) when its last successful
//! tick is at most 3 × `sleep_time` ago: a CodaLab or platform outage makes it unhealthy, which
//! is what an alert or a readiness probe wants. It is alive when its loop ended a tick,
//! successful or not, within [`LIVE_LIMIT`] (or 3 × `sleep_time`, if longer): only a stuck
//! process fails that, so a liveness probe on `/livez` never restarts the manager because the
//! server is down (a restart fixes no outage and starts every backoff again). [`Health`]
//! follows the status snapshots (and the `sleep_time` each reports, so a reload that changes it
//! moves both limits) and answers with the reason, in the words the endpoints serve.

use codalab_wm_core::status::Status;
use std::time::{Duration, Instant};

/// How long the loop may go without ending a tick before `/livez` fails: well past the error
/// policy's longest delay (5 minutes) plus a slow tick's calls, each bounded by its timeout.
pub const LIVE_LIMIT: Duration = Duration::from_secs(15 * 60);

/// When a tick last succeeded and last ended, and the limits they are held to.
#[derive(Debug, Clone)]
pub struct Health {
    /// 3 × `sleep_time`.
    limit: Duration,
    started: Instant,
    last_success: Option<Instant>,
    last_tick: Option<Instant>,
}

impl Health {
    /// A manager started at `started` that ticks every `sleep_time`.
    pub fn new(sleep_time: Duration, started: Instant) -> Self {
        Self {
            limit: sleep_time * 3,
            started,
            last_success: None,
            last_tick: None,
        }
    }

    /// Takes in a snapshot seen at `now`; `new_tick` when it reports a tick not seen before
    /// ([`StatusExporter::observe`](super::StatusExporter::observe)), so that seeing the same
    /// snapshot again does not count as a success. The limit follows the snapshot's
    /// `sleep_time` (a snapshot made before any tick reports none).
    pub fn observe(&mut self, new_tick: bool, status: &Status, now: Instant) {
        if let Some(sleep_time) = status_sleep_time(status) {
            self.limit = sleep_time * 3;
        }
        if new_tick && status.last_error.is_none() {
            self.last_success = Some(now);
        }
        if new_tick {
            self.last_tick = Some(now);
        }
    }

    /// `Ok` (alive) or `Err` (stuck), with the text `/livez` answers: whether the loop ended a
    /// tick, successful or not, within [`LIVE_LIMIT`] (or 3 × `sleep_time`) of `now`.
    pub fn live(&self, now: Instant) -> Result<String, String> {
        let limit = LIVE_LIMIT.max(self.limit);
        let (since, what) = match self.last_tick {
            Some(at) => (now.duration_since(at), "last tick ended"),
            None => (
                now.duration_since(self.started),
                "no tick ended yet; started",
            ),
        };
        let words = format!(
            "{what} {} s ago (limit {} s)\n",
            since.as_secs(),
            limit.as_secs()
        );
        match since <= limit {
            true => Ok(format!("alive: {words}")),
            false => Err(format!("stuck: {words}")),
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

/// The `sleep_time` a snapshot reports, if it reports one.
pub fn status_sleep_time(status: &Status) -> Option<Duration> {
    Duration::try_from_secs_f64(status.sleep_time_seconds)
        .ok()
        .filter(|d| !d.is_zero())
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

    /// A server outage makes the manager unhealthy, never dead: failed ticks keep it alive;
    /// only a loop that ends no tick for 15 minutes is stuck.
    #[test]
    fn alive_while_ticks_end_even_failed_ones() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut health = Health::new(s(5), t0);
        assert_eq!(
            health.live(t0 + s(60)),
            Ok("alive: no tick ended yet; started 60 s ago (limit 900 s)\n".into())
        );
        let failed = Status {
            last_error: Some("codalab server unreachable".into()),
            ..Status::default()
        };
        for minute in 1..=30 {
            health.observe(true, &failed, t0 + s(60 * minute));
            let now = t0 + s(60 * minute + 30);
            assert!(health.check(failed.last_error.as_deref(), now).is_err());
            assert!(health.live(now).is_ok(), "minute {minute}");
        }
        assert_eq!(
            health.live(t0 + s(60 * 30 + 901)),
            Err("stuck: last tick ended 901 s ago (limit 900 s)\n".into())
        );
        assert!(
            Health::new(s(600), t0).live(t0 + s(1800)).is_ok(),
            "3 × sleep_time"
        );
    }

    /// A reload that changes `sleep_time` moves the limits from the next snapshot on.
    #[test]
    fn the_limits_follow_the_sleep_time_of_the_last_snapshot() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut health = Health::new(s(5), t0);
        let reloaded = Status {
            sleep_time_seconds: 400.0,
            ..Status::default()
        };
        health.observe(true, &reloaded, t0);
        assert_eq!(
            health.check(None, t0 + s(1000)),
            Ok("ok: last successful tick 1000 s ago (limit 1200 s)\n".into())
        );
        assert_eq!(
            health.live(t0 + s(1000)),
            Ok("alive: last tick ended 1000 s ago (limit 1200 s)\n".into())
        );
        health.observe(false, &Status::default(), t0);
        assert!(
            health.check(None, t0 + s(1000)).is_ok(),
            "a snapshot with no sleep_time keeps the limit"
        );
    }
}
