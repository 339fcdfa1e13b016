//! How a run of failed ticks is reported: a manager that cannot reach its server must keep
//! saying so at WARN (a typo'd port otherwise looks like a hang), but not every tick. The first
//! failure of a streak is reported, then the 2nd, 4th, 8th … and at least once a minute, each
//! with the number of failed ticks and the time since the last successful one.

use std::time::Duration;
use tokio::time::Instant;

/// At most this long between two reports of the same streak.
pub const REPORT_EVERY: Duration = Duration::from_secs(60);

/// The current run of failed ticks.
#[derive(Debug)]
pub struct Streak {
    /// Failed ticks in a row.
    failures: u32,
    /// The kind of the last failure (a new kind is reported at once).
    kind: Option<String>,
    last_report: Option<Instant>,
    last_success: Option<Instant>,
    started: Instant,
}

/// What to say about one failed tick.
pub struct Report {
    /// Failed ticks in a row, this one included.
    pub failures: u32,
    /// `last successful tick 3m 20s ago` or `no successful tick since the start 40s ago`.
    pub since: String,
}

impl Streak {
    /// No failure yet; the manager started at `started`.
    pub fn new(started: Instant) -> Self {
        Self {
            failures: 0,
            kind: None,
            last_report: None,
            last_success: None,
            started,
        }
    }

    /// A successful tick at `now`; returns the failures of the streak it ends, with its kind.
    pub fn success(&mut self, now: Instant) -> Option<(u32, String)> {
        self.last_success = Some(now);
        self.last_report = None;
        let failures = std::mem::take(&mut self.failures);
        self.kind.take().map(|kind| (failures, kind))
    }

    /// A failed tick of `kind` at `now`: `Some` when it is to be reported at WARN.
    pub fn failure(&mut self, kind: String, now: Instant) -> Option<Report> {
        self.failures = self.failures.saturating_add(1);
        let new_kind = self.kind.as_deref() != Some(kind.as_str());
        self.kind = Some(kind);
        let due = self
            .last_report
            .is_none_or(|last| now.saturating_duration_since(last) >= REPORT_EVERY);
        if !(new_kind || due || self.failures.is_power_of_two()) {
            return None;
        }
        self.last_report = Some(now);
        let since = match self.last_success {
            Some(at) => format!("last successful tick {} ago", human(now - at)),
            None => format!(
                "no successful tick since the start {} ago",
                human(now - self.started)
            ),
        };
        Some(Report {
            failures: self.failures,
            since,
        })
    }
}

/// `45s`, `3m 20s`, `2h 5m`.
pub fn human(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m {}s", seconds / 60, seconds % 60),
        _ => format!("{}h {}m", seconds / 3600, seconds % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_first_then_powers_of_two_then_each_minute() {
        let start = Instant::now();
        let mut streak = Streak::new(start);
        let mut reported = Vec::new();
        for n in 1..=20u32 {
            let now = start + Duration::from_secs(u64::from(n));
            if let Some(report) = streak.failure("unreachable:login".into(), now) {
                reported.push(report.failures);
            }
        }
        assert_eq!(reported, [1, 2, 4, 8, 16]);
        let late = start + Duration::from_secs(16 + 60);
        let report = streak.failure("unreachable:login".into(), late).unwrap();
        assert_eq!(report.failures, 21);
        assert_eq!(
            report.since,
            "no successful tick since the start 1m 16s ago"
        );
        assert_eq!(streak.success(late), Some((21, "unreachable:login".into())));
        let report = streak
            .failure("x".into(), late + Duration::from_secs(5))
            .unwrap();
        assert_eq!(
            (report.failures, report.since.as_str()),
            (1, "last successful tick 5s ago")
        );
    }
}
