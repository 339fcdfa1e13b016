//! What a pool's hedges cost ([`crate::pools::hedge`]): the launches it made in the rolling
//! day for bundles hedged from other pools, against its `hedges_per_day`. Kept in the pool's
//! launch record, so that a restart, a crash or a reload does not hand out the day's hedges
//! again.

use super::runtime::PoolRuntime;
use std::time::Duration;

/// The window `hedges_per_day` counts over, in seconds.
const DAY: i64 = 24 * 3600;

/// `now` on the manager clock, in whole seconds (a hedge from before a restart is before the
/// clock's zero: negative).
fn seconds(now: Duration) -> i64 {
    i64::try_from(now.as_secs()).unwrap_or(i64::MAX)
}

impl PoolRuntime {
    /// Launches the pool may still make for hedges at `now`: its `hedges_per_day` less those
    /// of the last day.
    pub(crate) fn hedge_room(&mut self, now: Duration) -> usize {
        let since = seconds(now) - DAY;
        self.hedge_times.retain(|at| *at > since);
        let per_day = self.pool.policy.hedges_per_day as usize;
        per_day.saturating_sub(self.hedge_times.len())
    }

    /// Notes `count` launches for hedges made at `now` and writes them to the record, with
    /// their time since the Unix epoch (`start`: the clock's zero as that).
    pub(crate) fn hedged(&mut self, count: u32, now: Duration, start: Duration) {
        if count == 0 {
            return;
        }
        self.hedge_times.extend((0..count).map(|_| seconds(now)));
        let start = seconds(start);
        let unix = self.hedge_times.iter().map(|at| start + at);
        self.record.set_hedges(unix.collect());
    }

    /// Takes the hedges a restart finds in the record (`start`: the clock's zero as time
    /// since the Unix epoch).
    pub(crate) fn restore_hedges(&mut self, start: Duration) {
        let start = seconds(start);
        self.hedge_times = self
            .record
            .hedges()
            .iter()
            .map(|unix| unix - start)
            .collect();
    }
}
