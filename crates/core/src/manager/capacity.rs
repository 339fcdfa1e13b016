//! A pool's capacity memory at work ([`crate::pools::fallback`]): the manager notes each
//! capacity event (a preemption, a launch the platform had no capacity for, jobs stopped
//! past `pending_timeout`), each first check-in and each tick's clock, and says every switch
//! once, in the log and as a `capacity_switched` event.

use super::runtime::PoolRuntime;
use super::status::TickEvent;
use crate::events::CapacitySwitch;
use crate::pools::fallback::Switch;
use std::time::Duration;

impl PoolRuntime {
    /// A capacity event at `now`, in words.
    pub fn capacity_event(&mut self, now: Duration, what: String) -> Vec<TickEvent> {
        let Some(rules) = self.pool.policy.fallback.clone() else {
            return Vec::new();
        };
        let switch = self.capacity.event(&rules, now, what);
        self.switched(switch)
    }

    /// The clock reads `now`: the cool-down may be over, or a retry's worker overdue.
    pub fn capacity_tick(&mut self, now: Duration) -> Vec<TickEvent> {
        let mut events = Vec::new();
        if let Some(rules) = self.pool.policy.fallback.clone() {
            let within = self.pool.policy.retry_within();
            let switch = self.capacity.retry_overdue(&rules, now, within);
            events.extend(self.switched(switch));
        }
        let switch = self.capacity.tick(now);
        events.extend(self.switched(switch));
        events
    }

    /// A worker of the pool checked in for the first time.
    pub fn capacity_checked_in(&mut self) -> Vec<TickEvent> {
        let switch = self.capacity.checked_in();
        self.switched(switch)
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
