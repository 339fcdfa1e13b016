//! The keys of a `[[pools]]` entry, each written once: its type, its doc (the line `config
//! init` writes above it and `config check` quotes), its default (the serde default beside
//! it, or what an unset key means), whether it is a duration in seconds (bounded by
//! [`MAX_SECONDS`](super::MAX_SECONDS)) and its example. Everything else is derived from
//! here: the config template and checker read [`PoolRules::KEYS`], the bounds check walks it,
//! `simulate --set` edits the file's entry and reads it through [`PoolRules`], the operator
//! maps its spec by these names, and [`PoolRules::policy`] (below) is the one place a key
//! turns into the policy's field.
//!
//! Adding a key: declare it here (doc, `#[key(…)]`, serde default), set the policy's field in
//! [`PoolRules::policy`], and use it where the policy is applied.

use crate::LaunchMode;
use serde::{Deserialize, Serialize};

/// What the config tooling knows of one `[[pools]]` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolKey {
    /// The key, as the file spells it.
    pub name: &'static str,
    /// Its doc comment, as written (see [`PoolKey::doc`]).
    doc: &'static str,
    /// A duration in seconds: at most [`MAX_SECONDS`](super::MAX_SECONDS).
    pub seconds: bool,
    /// A value to show, commented out, for a key unset by default.
    pub example: Option<&'static str>,
    /// What an unset key means, when it is a number (`fallback_after`: 3).
    pub unset: Option<u64>,
}

impl PoolKey {
    /// What a key is when `#[key]` says nothing more.
    const PLAIN: PoolKey = PoolKey {
        name: "",
        doc: "",
        seconds: false,
        example: None,
        unset: None,
    };

    /// The doc as one line without its final period, and `[default: N]` when an unset key
    /// means a number.
    pub fn doc(&self) -> String {
        let doc = self.doc.split_whitespace().collect::<Vec<_>>().join(" ");
        let doc = doc.trim_end_matches('.');
        match self.unset {
            Some(value) => format!("{doc} [default: {value}]"),
            None => doc.to_owned(),
        }
    }
}

/// Declares [`PoolRules`] and its [`PoolRules::KEYS`] from one list of fields, so that a key's
/// doc and metadata cannot be written apart from it (the shape of rust-analyzer's
/// `config_data!`).
macro_rules! pool_rules {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                #[key $(($($key:tt)*))?]
                $(#[serde($($serde:tt)*)])*
                pub $field:ident : $ty:ty,
            )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $(
                $(#[doc = $doc])*
                $(#[serde($($serde)*)])*
                pub $field: $ty,
            )*
        }

        impl $name {
            /// Every key, in the file's order.
            #[allow(clippy::needless_update)] // a key whose `#[key(…)]` sets every field
            pub const KEYS: &'static [PoolKey] = &[$(
                PoolKey {
                    name: stringify!($field),
                    doc: concat!($($doc, "\n"),*),
                    $($($key)*,)?
                    ..PoolKey::PLAIN
                },
            )*];
        }
    };
}

pool_rules! {
    /// The keys of a `[[pools]]` entry besides its backend table.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct PoolRules {
        /// Unique name: letters, digits and `_`.
        #[key]
        pub name: String,
        /// The pool's backend; its settings go in `[pools.<backend table>]`.
        #[key]
        pub backend: String,
        /// Workers kept at least.
        #[key]
        #[serde(default)]
        pub min: u32,
        /// Workers at most (jobs being stopped count).
        #[key]
        #[serde(default = "default_max")]
        pub max: u32,
        /// Tag put on the pool's workers; bundles with request_queue = tag need this pool.
        #[key(example: Some("\"gpu\""))]
        pub tag: Option<String>,
        /// The pool's workers run only bundles of their tag.
        #[key]
        #[serde(default)]
        pub tag_exclusive: bool,
        /// Preference among pools of the same cost_per_hour: the lower first (ties: file
        /// order).
        #[key]
        #[serde(default)]
        pub cost: f64,
        /// Seconds a bundle may be expected to wait for this pool while a pricier fitting pool
        /// would start it sooner; past it the bundle goes there [default: any wait].
        #[key(seconds: true, example: Some("600"))]
        pub spill_after: Option<u64>,
        /// Seconds a bundle may be expected to wait for this pool before it is also launched
        /// for on the next fitting pool that would start it sooner and takes hedges
        /// (hedges_per_day); the first worker to take it wins, and a launch not yet started
        /// is withdrawn [default: no hedge].
        #[key(seconds: true, example: Some("120"))]
        pub hedge_after: Option<u64>,
        /// Launches per rolling 24 hours this pool may make for bundles that wait on another
        /// pool past its hedge_after.
        #[key(example: Some("20"), unset: Some(0))]
        pub hedges_per_day: Option<u32>,
        /// The pool new launches go to when this pool's capacity fails (a Spot pool's
        /// on-demand twin).
        #[key(example: Some("\"gpu_standard\""))]
        pub fallback: Option<String>,
        /// Capacity events (preemptions, stockouts, jobs pending past pending_timeout) within
        /// fallback_window that switch to the fallback.
        #[key(example: Some("3"), unset: Some(fallback::DEFAULT_AFTER as u64))]
        pub fallback_after: Option<u32>,
        /// Seconds capacity events count for.
        #[key(
            seconds: true,
            example: Some("1800"),
            unset: Some(fallback::DEFAULT_WINDOW.as_secs())
        )]
        pub fallback_window: Option<u64>,
        /// Seconds on the fallback, since the last capacity event, before one launch tries
        /// this pool again.
        #[key(
            seconds: true,
            example: Some("1800"),
            unset: Some(fallback::DEFAULT_COOLDOWN.as_secs())
        )]
        pub fallback_cooldown: Option<u64>,
        /// Workers kept on the fallback whenever this pool has bundles.
        #[key(example: Some("1"), unset: Some(0))]
        pub min_on_demand: Option<u32>,
        /// Seconds a job may stay pending before it is stopped and replaced elsewhere (target
        /// mode).
        #[key(seconds: true, example: Some("900"))]
        pub pending_timeout: Option<u64>,
        /// Seconds a job that just became active counts as free capacity (its worker has not
        /// yet taken a bundle).
        #[key(
            seconds: true,
            example: Some("30"),
            unset: Some(crate::pools::DEFAULT_STARTUP_GRACE.as_secs())
        )]
        pub startup_grace: Option<u64>,
        /// Seconds a running job may go without its worker checking in before it is stopped
        /// and replaced (target mode) [default: the global worker_checkin_timeout].
        #[key(seconds: true, example: Some("300"))]
        pub checkin_timeout: Option<u64>,
        /// Seconds a pending job of this manager may stay unneeded (beyond the pool's busy
        /// workers, its min and the staged bundles it could run) before it is withdrawn:
        /// cancelled before it starts (target mode). Unset: at the first decision that finds it
        /// unneeded; longer keeps a job's place in a queue that ranks by age, and a spare
        /// launch for the next bundle to arrive (lower waits, more idle workers).
        #[key(
            seconds: true,
            example: Some("300"),
            unset: Some(crate::PoolPolicy::DEFAULT_WITHDRAW_AFTER.as_secs())
        )]
        pub withdraw_after: Option<u64>,
        /// Jobs kept launched or pending per worker the staged bundles need, from 1 (no race)
        /// to 4: at 2, two jobs pend for each; the first to check in take the bundles and the
        /// rest are withdrawn before they start (target mode). Shorter waits where pending is
        /// free and start times vary (a Slurm queue, AWS Batch RUNNABLE, a pod waiting for a
        /// node); where a worker is billed while it boots, each loser costs its boot.
        #[key(example: Some("2"), unset: Some(crate::PoolPolicy::NO_RACE as u64))]
        pub race: Option<f64>,
        /// Seconds between two ticks while the pool races launches for waiting bundles and some
        /// pend (at least 1), instead of the global sleep_time: the losers are withdrawn as
        /// soon as the winners check in, before more of them start and idle. Each tick reads
        /// the server (about 17 ms of its CPU); sleep_time or more keeps the usual pace.
        #[key(
            seconds: true,
            example: Some("2"),
            unset: Some(crate::PoolPolicy::DEFAULT_RACE_WATCH.as_secs())
        )]
        pub race_watch: Option<u64>,
        /// compat (upstream's rules) or target.
        #[key]
        #[serde(default = "default_mode")]
        pub launch_mode: LaunchMode,
        /// Launches per tick at most.
        #[key]
        #[serde(default = "default_launches_per_tick")]
        pub max_launches_per_tick: u32,
        /// Seconds between two launches of this pool [default: the global setting].
        #[key(seconds: true, example: Some("0"))]
        pub min_seconds_between_workers: Option<u64>,
        /// The pool's budget: worker-hours per rolling 24 hours [default: no limit].
        #[key(example: Some("96"))]
        pub max_worker_hours_per_day: Option<f64>,
        /// The pool's budget: cost per rolling 24 hours (needs cost_per_hour) [default: no
        /// limit].
        #[key(example: Some("50"))]
        pub max_cost_per_day: Option<f64>,
        /// What one worker-hour of this pool costs (the platform's price): bundles go to the
        /// cheapest fitting pool first, and the cost budgets meter it [default: free].
        #[key(example: Some("0.5"))]
        pub cost_per_hour: Option<f64>,
    }
}

use crate::pools::fallback;

fn default_max() -> u32 {
    crate::policy::PolicyConfig::default().max_workers
}

fn default_mode() -> LaunchMode {
    LaunchMode::Target
}

fn default_launches_per_tick() -> u32 {
    1
}

impl PoolRules {
    /// The pool's fallback rules, when it names a fallback (the other keys' defaults in
    /// [`crate::pools::fallback`]).
    fn fallback(&self) -> Option<fallback::Fallback> {
        use fallback::{DEFAULT_AFTER, DEFAULT_COOLDOWN, DEFAULT_WINDOW, Fallback};
        let seconds = std::time::Duration::from_secs;
        Some(Fallback {
            pool: self.fallback.clone()?,
            after: self.fallback_after.unwrap_or(DEFAULT_AFTER),
            window: self.fallback_window.map_or(DEFAULT_WINDOW, seconds),
            cooldown: self.fallback_cooldown.map_or(DEFAULT_COOLDOWN, seconds),
            min_on_demand: self.min_on_demand.unwrap_or(0),
        })
    }

    /// Keys that mean something only beside `fallback`, when set without it.
    pub fn fallback_keys_alone(&self) -> Option<&'static str> {
        if self.fallback.is_some() {
            return None;
        }
        [
            ("fallback_after", self.fallback_after.is_some()),
            ("fallback_window", self.fallback_window.is_some()),
            ("fallback_cooldown", self.fallback_cooldown.is_some()),
            ("min_on_demand", self.min_on_demand.is_some()),
        ]
        .into_iter()
        .find_map(|(key, set)| set.then_some(key))
    }

    /// The values of the keys in seconds that are set, by key (what the bounds check walks).
    pub fn seconds(&self) -> Vec<(&'static str, u64)> {
        let Ok(serde_json::Value::Object(values)) = serde_json::to_value(self) else {
            return Vec::new();
        };
        (Self::KEYS.iter().filter(|key| key.seconds))
            .filter_map(|key| Some((key.name, values.get(key.name)?.as_u64()?)))
            .collect()
    }

    /// The pool's rules for a backend whose workers have `shape` (what `run` starts the pool
    /// with and what a reload applies).
    pub fn policy(
        &self,
        settings: &super::Settings,
        shape: crate::WorkerShape,
    ) -> crate::PoolPolicy {
        let seconds = std::time::Duration::from_secs;
        crate::PoolPolicy {
            min: self.min,
            max: self.max,
            tag: self.tag.clone(),
            tag_exclusive: self.tag_exclusive,
            check_shape: !settings.no_prefilter,
            cost: self.cost,
            spill_after: self.spill_after.map(seconds),
            hedge_after: self.hedge_after.map(seconds),
            hedges_per_day: self.hedges_per_day.unwrap_or(0),
            fallback: self.fallback(),
            pending_timeout: self.pending_timeout.map(seconds),
            startup_grace: self
                .startup_grace
                .map_or(crate::pools::DEFAULT_STARTUP_GRACE, seconds),
            checkin_timeout: seconds(
                self.checkin_timeout
                    .unwrap_or(settings.worker_checkin_timeout),
            ),
            withdraw_after: self
                .withdraw_after
                .map_or(crate::PoolPolicy::DEFAULT_WITHDRAW_AFTER, seconds),
            race: self.race.unwrap_or(crate::PoolPolicy::NO_RACE),
            race_watch: self
                .race_watch
                .map_or(crate::PoolPolicy::DEFAULT_RACE_WATCH, seconds),
            launch_mode: self.launch_mode,
            max_launches_per_tick: self.max_launches_per_tick,
            min_seconds_between_workers: self
                .min_seconds_between_workers
                .unwrap_or(settings.min_seconds_between_workers),
            budget: crate::budget::BudgetLimits {
                max_worker_hours_per_day: self.max_worker_hours_per_day,
                max_cost_per_day: self.max_cost_per_day,
            },
            cost_per_hour: self.cost_per_hour,
            ..crate::PoolPolicy::new(self.name.clone(), shape)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_a_key_with_a_doc_in_the_files_order() {
        let fields = crate::describe::fields_of::<PoolRules>();
        let keys: Vec<&str> = PoolRules::KEYS.iter().map(|k| k.name).collect();
        assert_eq!(fields, keys.as_slice());
        for key in PoolRules::KEYS {
            let doc = key.doc();
            assert!(
                !doc.is_empty() && !doc.ends_with('.'),
                "{}: {doc:?}",
                key.name
            );
            assert!(
                !doc.contains("  ") && !doc.contains('\n'),
                "{}: {doc:?}",
                key.name
            );
        }
    }

    #[test]
    fn an_unset_keys_meaning_is_its_docs_default() {
        let key = |name| PoolRules::KEYS.iter().find(|k| k.name == name).unwrap();
        assert_eq!(
            key("fallback_after").doc(),
            "Capacity events (preemptions, stockouts, jobs pending past pending_timeout) within \
             fallback_window that switch to the fallback [default: 3]"
        );
        assert!(key("startup_grace").doc().ends_with("[default: 30]"));
        assert_eq!(key("min").doc(), "Workers kept at least");
    }

    #[test]
    fn withdraw_after_is_the_policys_or_none() {
        let settings = super::super::Settings::default();
        let shape = crate::WorkerShape::from_flags(1, 0, 1024);
        let rules = |extra: serde_json::Value| {
            let mut entry = serde_json::json!({"name": "p", "backend": "local"});
            entry
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            serde_json::from_value::<PoolRules>(entry).unwrap()
        };
        let policy = rules(serde_json::json!({})).policy(&settings, shape);
        assert_eq!(policy.withdraw_after, std::time::Duration::ZERO);
        let policy = rules(serde_json::json!({"withdraw_after": 300})).policy(&settings, shape);
        assert_eq!(policy.withdraw_after, std::time::Duration::from_secs(300));
    }

    #[test]
    fn the_seconds_read_are_the_keys_marked_seconds_that_are_set() {
        let rules: PoolRules = serde_json::from_value(serde_json::json!({
            "name": "p", "backend": "local", "spill_after": 60, "startup_grace": 5, "max": 9,
        }))
        .unwrap();
        assert_eq!(rules.seconds(), [("spill_after", 60), ("startup_grace", 5)]);
    }
}
