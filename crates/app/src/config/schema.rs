//! What the config file may hold, read from the code itself so that `config init` and
//! `config check` cannot drift from what `run` accepts: the keys of each table are the fields of
//! the struct that table deserializes into (asked of its `Deserialize` impl), the defaults are
//! the `Default` structs serialized, and the docs are the help of the matching flag (or, for
//! keys without a flag, a line in [`EXTRA_DOCS`]). The program supplies the help of its global
//! flags and its backends ([`Program`]).

use codalab_wm_core::describe::{BackendKind, Catalogue, TableSchema, fields_of};
use codalab_wm_core::settings::{PoolRules, Settings, WorkerSettings};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::collections::HashMap;

pub use codalab_wm_core::describe::PLACEHOLDER;

/// What the config file tooling needs from the program that reads the file: its backends and
/// the help of its global and `--worker-*` flags (by config key).
#[derive(Debug, Clone)]
pub struct Program {
    /// Every backend.
    pub catalogue: Catalogue,
    /// The help of the global flags, by key (`max_workers`).
    pub top_docs: HashMap<String, String>,
    /// The help of the `--worker-*` flags, by `[worker]` key.
    pub worker_docs: HashMap<String, String>,
}

/// A table of the config file's own (not a backend's): its keys, defaults and docs.
fn table<T: DeserializeOwned>(
    name: &'static str,
    defaults: Value,
    mut docs: HashMap<String, String>,
) -> TableSchema {
    for (table, key, doc) in EXTRA_DOCS {
        if *table == name {
            docs.entry((*key).to_owned())
                .or_insert_with(|| (*doc).to_owned());
        }
    }
    TableSchema {
        name,
        fields: fields_of::<T>(),
        defaults: match defaults {
            Value::Object(map) => map,
            _ => Map::new(),
        },
        docs,
    }
}

/// The keys of `table` that are options (not sub-tables).
pub fn options<'a>(
    table: &'a TableSchema,
    nested: &'a [&str],
) -> impl Iterator<Item = &'static str> + 'a {
    table
        .fields
        .iter()
        .copied()
        .filter(|f| !nested.contains(f) && !["pools", "worker", "notify"].contains(f))
}

/// The top level.
pub fn top(program: &Program) -> TableSchema {
    let defaults = serde_json::to_value(Settings::default()).unwrap_or_default();
    let mut top = table::<Settings>("", defaults, program.top_docs.clone());
    let names = program.catalogue.names().join(", ");
    let doc = format!(
        "The backend to run when no subcommand is given ({names}); leave unset with [[pools]]"
    );
    top.docs.insert("backend".into(), doc);
    top
}

/// `[worker]`.
pub fn worker(program: &Program) -> TableSchema {
    let defaults = serde_json::to_value(WorkerSettings::default()).unwrap_or_default();
    table::<WorkerSettings>("worker", defaults, program.worker_docs.clone())
}

/// `[[pools]]` (its backend sub-table is the backend's own schema).
pub fn pools() -> TableSchema {
    let minimal = serde_json::json!({"name": "", "backend": ""});
    let defaults = serde_json::from_value::<PoolRules>(minimal)
        .ok()
        .and_then(|p| serde_json::to_value(p).ok())
        .unwrap_or_default();
    table::<PoolRules>("pools", defaults, HashMap::new())
}

/// The example of `key` in `table` (a backend's table: `kind`), if there is one.
pub fn example(table: &str, key: &str, kind: Option<&dyn BackendKind>) -> Option<&'static str> {
    let backend = kind.into_iter().flat_map(|k| k.examples().iter().copied());
    EXAMPLES
        .iter()
        .filter(|(t, _, _)| *t == table)
        .map(|(_, k, v)| (*k, *v))
        .chain(backend)
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// Docs of keys that have no flag of their own.
pub const EXTRA_DOCS: &[(&str, &str, &str)] = &[
    (
        "",
        "temp_session",
        "Accepted for compatibility with upstream (this manager never writes session state)",
    ),
    (
        "",
        "max_worker_hours_per_day",
        "Budget over all pools: worker-hours per rolling 24 hours; when reached, no new launches (running workers finish) until the window rolls on [default: no limit]",
    ),
    (
        "",
        "max_cost_per_day",
        "Budget over all pools: cost (worker-hours × cost_per_hour) per rolling 24 hours [default: no limit]",
    ),
    (
        "",
        "cost_per_hour",
        "What one worker-hour of the single backend costs, for max_cost_per_day (pools set their own)",
    ),
    ("pools", "name", "Unique name: letters, digits and `_`"),
    (
        "pools",
        "backend",
        "The pool's backend; its settings go in [pools.<backend table>]",
    ),
    ("pools", "min", "Workers kept at least"),
    ("pools", "max", "Workers at most (jobs being stopped count)"),
    (
        "pools",
        "tag",
        "Tag put on the pool's workers; bundles with request_queue = tag need this pool",
    ),
    (
        "pools",
        "tag_exclusive",
        "The pool's workers run only bundles of their tag",
    ),
    (
        "pools",
        "cost",
        "Preference among pools of the same cost_per_hour: the lower first (ties: file order)",
    ),
    (
        "pools",
        "spill_after",
        "Seconds a bundle may be expected to wait for this pool while a pricier fitting pool would start it sooner; past it the bundle goes there [default: any wait]",
    ),
    (
        "pools",
        "fallback",
        "The pool new launches go to when this pool's capacity fails (a Spot pool's on-demand twin)",
    ),
    (
        "pools",
        "fallback_after",
        "Capacity events (preemptions, stockouts, jobs pending past pending_timeout) within fallback_window that switch to the fallback [default: 3]",
    ),
    (
        "pools",
        "fallback_window",
        "Seconds capacity events count for [default: 1800]",
    ),
    (
        "pools",
        "fallback_cooldown",
        "Seconds on the fallback, since the last capacity event, before one launch tries this pool again [default: 1800]",
    ),
    (
        "pools",
        "min_on_demand",
        "Workers kept on the fallback whenever this pool has bundles [default: 0]",
    ),
    (
        "pools",
        "pending_timeout",
        "Seconds a job may stay pending before it is stopped and replaced elsewhere (target mode)",
    ),
    (
        "pools",
        "startup_grace",
        "Seconds a job that just became active counts as free capacity [default: 30]",
    ),
    (
        "pools",
        "checkin_timeout",
        "Seconds a running job may go without its worker checking in before it is stopped and replaced (target mode) [default: the global setting]",
    ),
    (
        "pools",
        "launch_mode",
        "compat (upstream's rules) or target",
    ),
    (
        "pools",
        "max_launches_per_tick",
        "Launches per tick at most",
    ),
    (
        "pools",
        "min_seconds_between_workers",
        "Seconds between two launches of this pool [default: the global setting]",
    ),
    (
        "pools",
        "max_worker_hours_per_day",
        "The pool's budget: worker-hours per rolling 24 hours [default: no limit]",
    ),
    (
        "pools",
        "max_cost_per_day",
        "The pool's budget: cost per rolling 24 hours (needs cost_per_hour) [default: no limit]",
    ),
    (
        "pools",
        "cost_per_hour",
        "What one worker-hour of this pool costs (the platform's price): bundles go to the cheapest fitting pool first (unset: free), and the cost budgets meter it",
    ),
];

/// Example values of options that are unset by default, written commented out.
pub const EXAMPLES: &[(&str, &str, &str)] = &[
    ("", "restart_after_seconds", "86400"),
    ("", "password_file", "\"/etc/codalab-wm/password\""),
    ("", "exit_after_num_failed", "10"),
    ("", "ca_cert", "\"/etc/codalab-wm/ca.pem\""),
    ("", "listen", "\"127.0.0.1:9464\""),
    ("", "listen_hosts", "[\"wm.example.org\"]"),
    ("", "worker_server", "\"http://codalab.internal:2900\""),
    ("", "record_dir", "\"/var/lib/codalab-wm/records\""),
    ("", "backend", "\"local\""),
    ("", "max_worker_hours_per_day", "240"),
    ("", "max_cost_per_day", "100"),
    ("", "cost_per_hour", "0.5"),
    ("worker", "tag", "\"my-tag\""),
    ("worker", "group", "\"my-group\""),
    ("worker", "work_dir_prefix", "\"/scratch\""),
    ("worker", "max_work_dir_size", "\"88g\""),
    ("worker", "checkin_frequency_seconds", "20"),
    ("worker", "exit_after_num_runs", "100"),
    ("worker", "shared_memory_size_gb", "2"),
    ("pools", "tag", "\"gpu\""),
    ("pools", "pending_timeout", "900"),
    ("pools", "startup_grace", "30"),
    ("pools", "checkin_timeout", "300"),
    ("pools", "min_seconds_between_workers", "0"),
    ("pools", "max_worker_hours_per_day", "96"),
    ("pools", "max_cost_per_day", "50"),
    ("pools", "cost_per_hour", "0.5"),
    ("pools", "spill_after", "600"),
    ("pools", "fallback", "\"gpu_standard\""),
    ("pools", "fallback_after", "3"),
    ("pools", "fallback_window", "1800"),
    ("pools", "fallback_cooldown", "1800"),
    ("pools", "min_on_demand", "1"),
];
