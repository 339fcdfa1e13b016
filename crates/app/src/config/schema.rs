//! What the config file may hold, read from the code itself so that `config init` and
//! `config check` cannot drift from what `run` accepts: the keys of each table are the fields of
//! the struct that table deserializes into (asked of its `Deserialize` impl), the defaults are
//! the `Default` structs serialized, and the docs are the help of the matching flag (or, for
//! keys without a flag, a line in [`EXTRA_DOCS`]; for `[[pools]]`, its keys' own
//! [`PoolRules::KEYS`]). The program supplies the help of its global
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
    let docs = (PoolRules::KEYS.iter())
        .map(|key| (key.name.to_owned(), key.doc()))
        .collect();
    table::<PoolRules>("pools", defaults, docs)
}

/// The example of `key` in `table` (a backend's table: `kind`), if there is one.
pub fn example(table: &str, key: &str, kind: Option<&dyn BackendKind>) -> Option<&'static str> {
    let backend = kind.into_iter().flat_map(|k| k.examples().iter().copied());
    let pools = (PoolRules::KEYS.iter()).filter_map(|k| Some(("pools", k.name, k.example?)));
    (EXAMPLES.iter().copied().chain(pools))
        .filter(|(t, _, _)| *t == table)
        .map(|(_, k, v)| (k, v))
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
    (
        "",
        "history_days",
        "Days of the queue's history kept in record_dir/history (one JSON-lines file a day: runs, workers, events, decisions, settings; no secret), which `advise` replays; 0: none",
    ),
    (
        "",
        "history_max_mb",
        "Megabytes the history may take at most; the oldest days are deleted first",
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
];
