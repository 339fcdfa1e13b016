//! A pool's capacity memory at work ([`crate::pools::fallback`]): the manager notes each
//! capacity event (a preemption, a launch the platform had no capacity for, jobs stopped
//! past `pending_timeout`), each first check-in and each tick's clock, and says every switch
//! once, in the log and as a `capacity_switched` event. The memory is kept in the pool's launch
//! record (review §8), so a restart goes on with it.

use super::runtime::PoolRuntime;
use crate::events::CapacitySwitch;
use crate::pools::fallback::Switch;
use crate::status::TickEvent;
use std::time::Duration;

impl PoolRuntime {
    /// A capacity event at `now`, in words.
    pub fn capacity_event(&mut self, now: Duration, what: String) -> Vec<TickEvent> {
        let Some(rules) = self.pool.policy.fallback.clone() else {
            return Vec::new();
        };
        let switch = self.capacity.event(&rules, now, what);
        self.save_capacity(now);
        self.switched(switch)
    }

    /// The clock reads `now`: the cool-down may be over, or a retry's worker overdue.
    pub fn capacity_tick(&mut self, now: Duration) -> Vec<TickEvent> {
        let overdue = self.pool.policy.fallback.clone().and_then(|rules| {
            let within = self.pool.policy.retry_within();
            self.capacity.retry_overdue(&rules, now, within)
        });
        let cooled = self.capacity.tick(now);
        if overdue.is_some() || cooled.is_some() {
            self.save_capacity(now);
        }
        let mut events = self.switched(overdue);
        events.extend(self.switched(cooled));
        events
    }

    /// A worker of the pool checked in for the first time.
    pub fn capacity_checked_in(&mut self) -> Vec<TickEvent> {
        let switch = self.capacity.checked_in();
        if switch.is_some() {
            let now = self.metered_at.unwrap_or_default();
            self.save_capacity(now);
        }
        self.switched(switch)
    }

    /// Writes the capacity memory to the launch record (a restart goes on with it), for a
    /// pool with a `fallback`; `now` is the manager clock.
    fn save_capacity(&mut self, now: Duration) {
        if self.pool.policy.fallback.is_some() {
            let start = super::record::unix_now().saturating_sub(now);
            self.record.set_capacity(self.capacity.to_unix(start));
        }
    }

    fn switched(&self, switch: Option<Switch>) -> Vec<TickEvent> {
        let (Some(switch), Some(rules)) = (switch, &self.pool.policy.fallback) else {
            return Vec::new();
        };
        let (pool, fallback) = (self.name(), rules.pool.as_str());
        tracing::warn!(pool, fallback, "pool {pool}: {switch} ({fallback})");
        let (code, why) = match switch {
            Switch::ToFallback { why } => ("to_fallback", Some(why)),
            Switch::Retry => ("retry", None),
            Switch::Restored => ("restored", None),
        };
        vec![TickEvent::CapacitySwitched(CapacitySwitch {
            pool: pool.to_owned(),
            fallback: fallback.to_owned(),
            switch: code,
            why,
        })]
    }
}
