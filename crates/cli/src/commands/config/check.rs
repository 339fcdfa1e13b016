//! `config check FILE`: every problem of a config file, with its line, without contacting
//! anything. The file is parsed with `toml_edit` (which keeps spans), then checked table by
//! table: each key on its own against the type of the struct the table deserializes into (so
//! one wrong key does not hide the next), each backend table with the backend's own config
//! type and `validate()`, then the combinations no manager could run with.

use super::schema::{self, BackendSchema, PLACEHOLDER, TableSchema};
use crate::settings::{PoolSettings, Settings, WorkerSettings};
use codalab_wm_core::{LaunchMode, WorkerShape};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::fmt;
use toml_edit::{Item, TableLike};

/// What kind of problem a [`Diagnostic`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Not TOML.
    Syntax,
    /// A `XXX-CUSTOMIZE-THIS-XXX` left.
    Placeholder,
    /// A key no table has.
    UnknownKey,
    /// A value of the wrong type.
    WrongType,
    /// A required key is missing.
    Missing,
    /// A value or combination no manager can run with.
    Invalid,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Syntax => "syntax error",
            Kind::Placeholder => "placeholder",
            Kind::UnknownKey => "unknown key",
            Kind::WrongType => "wrong type",
            Kind::Missing => "missing",
            Kind::Invalid => "invalid",
        })
    }
}

/// One problem, at a line (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The line.
    pub line: usize,
    /// The kind.
    pub kind: Kind,
    /// What is wrong, naming the key.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.line, self.kind, self.message)
    }
}

/// Every problem of the config file `text`, by line.
pub fn check(text: &str) -> Vec<Diagnostic> {
    let document = match toml_edit::ImDocument::parse(text.to_owned()) {
        Ok(document) => document,
        Err(error) => {
            let line = error.span().map_or(1, |s| line_of(text, s.start));
            return vec![Diagnostic {
                line,
                kind: Kind::Syntax,
                message: error
                    .message()
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join("; "),
            }];
        }
    };
    let mut checker = Checker {
        text,
        found: Vec::new(),
    };
    checker.placeholders(document.as_item(), "");
    checker.file(document.as_table());
    let mut found = checker.found;
    found.sort_by_key(|d| d.line);
    found.dedup();
    found
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// A TOML item as JSON, for the structs' own `Deserialize`.
pub fn to_json(item: &Item) -> Value {
    match item {
        Item::None => Value::Null,
        Item::Value(value) => value_json(value),
        Item::Table(table) => table_json(table),
        Item::ArrayOfTables(array) => Value::Array(array.iter().map(|t| table_json(t)).collect()),
    }
}

fn table_json(table: &dyn TableLike) -> Value {
    Value::Object(
        table
            .iter()
            .map(|(k, item)| (k.to_owned(), to_json(item)))
            .collect(),
    )
}

fn value_json(value: &toml_edit::Value) -> Value {
    use toml_edit::Value as V;
    match value {
        V::String(s) => Value::String(s.value().clone()),
        V::Integer(i) => Value::from(*i.value()),
        V::Float(f) => serde_json::Number::from_f64(*f.value()).map_or(Value::Null, Value::Number),
        V::Boolean(b) => Value::Bool(*b.value()),
        V::Datetime(d) => Value::String(d.value().to_string()),
        V::Array(a) => Value::Array(a.iter().map(value_json).collect()),
        V::InlineTable(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.to_owned(), value_json(v)))
                .collect(),
        ),
    }
}

/// A table being checked: where it is and what it holds.
struct Place<'a> {
    table: &'a dyn TableLike,
    /// `slurm_batch`, `pools[1].slurm_batch` … (empty: the top level).
    path: String,
    /// The line of its header (or first key).
    line: usize,
}

impl Place<'_> {
    fn key_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }
}

struct Checker<'t> {
    text: &'t str,
    found: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn push(&mut self, line: usize, kind: Kind, message: String) {
        self.found.push(Diagnostic {
            line,
            kind,
            message,
        });
    }

    fn line(&self, span: Option<std::ops::Range<usize>>, fallback: usize) -> usize {
        span.map_or(fallback, |s| line_of(self.text, s.start))
    }

    fn key_line(&self, place: &Place<'_>, key: &str) -> usize {
        let span = place.table.get_key_value(key).and_then(|(k, _)| k.span());
        self.line(span, place.line)
    }

    fn placeholders(&mut self, item: &Item, path: &str) {
        let join = |key: &str| {
            if path.is_empty() {
                key.to_owned()
            } else {
                format!("{path}.{key}")
            }
        };
        match item {
            Item::Table(table) => {
                for (key, item) in table.iter() {
                    self.placeholders(item, &join(key));
                }
            }
            Item::ArrayOfTables(array) => {
                for (index, table) in array.iter().enumerate() {
                    for (key, item) in table.iter() {
                        self.placeholders(item, &format!("{path}[{index}].{key}"));
                    }
                }
            }
            Item::Value(value) => self.value_placeholders(value, path),
            Item::None => {}
        }
    }

    fn value_placeholders(&mut self, value: &toml_edit::Value, path: &str) {
        match value {
            toml_edit::Value::String(s) if s.value().contains(PLACEHOLDER) => {
                let line = self.line(s.span(), 1);
                self.push(
                    line,
                    Kind::Placeholder,
                    format!("`{path}` is still {PLACEHOLDER}: set it"),
                );
            }
            toml_edit::Value::Array(a) => a.iter().for_each(|v| self.value_placeholders(v, path)),
            toml_edit::Value::InlineTable(t) => {
                for (key, v) in t.iter() {
                    self.value_placeholders(v, &format!("{path}.{key}"));
                }
            }
            _ => {}
        }
    }

    /// Checks each key of `place` against `schema` and the type `T` (on top of `base`, a
    /// valid value of `T`); returns `base` with every valid key of the table set.
    fn keys<T: DeserializeOwned>(
        &mut self,
        place: &Place<'_>,
        schema: &TableSchema,
        base: &Map<String, Value>,
        nested: &[&str],
    ) -> (Map<String, Value>, bool) {
        let mut merged = base.clone();
        let mut clean = true;
        for (key, item) in place.table.iter() {
            if nested.contains(&key) {
                continue;
            }
            let line = self.key_line(place, key);
            if !schema.fields.contains(&key) {
                let hint = suggestion(key, schema.fields);
                let in_table = if place.path.is_empty() {
                    "at the top level".to_owned()
                } else {
                    format!("in [{}]", place.path)
                };
                self.push(
                    line,
                    Kind::UnknownKey,
                    format!("`{key}` is not a setting {in_table}{hint}"),
                );
                clean = false;
                continue;
            }
            let mut candidate = merged.clone();
            candidate.insert(key.to_owned(), to_json(item));
            match serde_json::from_value::<T>(Value::Object(candidate.clone())) {
                Ok(_) => merged = candidate,
                Err(error) => {
                    self.push(
                        line,
                        Kind::WrongType,
                        format!("`{}`: {error}", place.key_path(key)),
                    );
                    clean = false;
                }
            }
        }
        (merged, clean)
    }

    fn file(&mut self, root: &toml_edit::Table) {
        let place = Place {
            table: root,
            path: String::new(),
            line: 1,
        };
        let top = schema::top();
        let mut nested: Vec<&str> = schema::BACKEND_TABLES.to_vec();
        nested.extend(["worker", "pools"]);
        let (merged, _) = self.keys::<Settings>(&place, &top, &top.defaults, &nested);
        let settings: Settings =
            serde_json::from_value(Value::Object(merged.clone())).unwrap_or_default();
        self.globals(&place, &settings);
        if let Some(item) = root.get("worker") {
            self.worker(item, &settings);
        }
        let backend = settings.backend.as_deref();
        for table in schema::BACKEND_TABLES {
            let given = root.get(table);
            let is_chosen = backend.and_then(crate::backends::table_of) == Some(table);
            if given.is_none() && !is_chosen {
                continue;
            }
            let line = given.and_then(Item::span).map_or_else(
                || self.key_line(&place, "backend"),
                |s| line_of(self.text, s.start),
            );
            self.backend_table(table, given, table.to_owned(), line, None);
        }
        if let Some(item) = root.get("pools") {
            self.pools(item, &settings, self.key_line(&place, "pools"));
        }
    }

    fn globals(&mut self, place: &Place<'_>, settings: &Settings) {
        if settings.max_workers < settings.min_workers {
            let line = self.key_line(place, "max_workers");
            self.push(
                line,
                Kind::Invalid,
                format!(
                    "max_workers ({}) is less than min_workers ({})",
                    settings.max_workers, settings.min_workers
                ),
            );
        }
        let line = self.key_line(place, "max_launches_per_tick");
        if settings.max_launches_per_tick == 0 {
            self.push(
                line,
                Kind::Invalid,
                "max_launches_per_tick must be at least 1".into(),
            );
        }
        if settings.max_launches_per_tick > 1 && settings.launch_mode == LaunchMode::Compat {
            self.push(
                line,
                Kind::Invalid,
                format!(
                    "max_launches_per_tick {} needs launch_mode = \"target\" (compat launches at most one worker per tick, as upstream)",
                    settings.max_launches_per_tick
                ),
            );
        }
        if let Err(message) = settings.check_durations() {
            let line = self.mentioned_line(place, &message);
            self.push(line, Kind::Invalid, message);
        }
        if let Some(name) = &settings.backend {
            let line = self.key_line(place, "backend");
            self.backend_name(name, line, "backend");
            if place.table.contains_key("pools") {
                self.push(
                    line,
                    Kind::Invalid,
                    "choose either `backend` or [[pools]], not both".into(),
                );
            }
        }
    }

    /// Whether backend `name` exists and is compiled in.
    fn backend_name(&mut self, name: &str, line: usize, key: &str) -> Option<BackendSchema> {
        if let Some(backend) = schema::backend_named(name) {
            return Some(backend);
        }
        let message = match crate::backends::ALL_BACKENDS
            .iter()
            .find(|(n, _)| *n == name)
        {
            Some((_, feature)) => {
                format!("`{key}` = {name:?}: not compiled in: rebuild with `--features {feature}`")
            }
            None => {
                let names: Vec<&str> = crate::backends::ALL_BACKENDS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect();
                format!(
                    "`{key}` = {name:?} is not a backend: use one of {}",
                    names.join(", ")
                )
            }
        };
        self.push(line, Kind::Invalid, message);
        None
    }

    fn worker(&mut self, item: &Item, settings: &Settings) {
        let Some(table) = item.as_table_like() else {
            let line = self.line(item.span(), 1);
            self.push(line, Kind::WrongType, "`worker` must be a table".into());
            return;
        };
        let place = Place {
            table,
            path: "worker".into(),
            line: self.line(item.span(), 1),
        };
        let schema = schema::worker();
        let base = serde_json::to_value(WorkerSettings::default())
            .ok()
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default();
        self.keys::<WorkerSettings>(&place, &schema, &base, &[]);
        if item.get("tag").is_some() && !settings.pools.is_empty() {
            let line = self.key_line(&place, "tag");
            self.push(
                line,
                Kind::Invalid,
                "with [[pools]], set `tag` per pool, not in [worker]".into(),
            );
        }
    }

    /// Checks a backend table (`given`, or an absent one the file needs) with the backend's
    /// own type and validation; returns its settings over the defaults when they are usable.
    fn backend_table(
        &mut self,
        table: &str,
        given: Option<&Item>,
        path: String,
        line: usize,
        pool: Option<&str>,
    ) -> Option<Map<String, Value>> {
        let Some(backend) = schema::backend_of_table(table) else {
            let feature = crate::backends::ALL_BACKENDS
                .iter()
                .find(|(n, _)| crate::backends::table_of(n) == Some(table))
                .map_or("full", |(_, f)| *f);
            self.push(
                line,
                Kind::Invalid,
                format!("[{path}]: its backend is not compiled in (rebuild with `--features {feature}`); not checked"),
            );
            return None;
        };
        let empty = toml_edit::Table::new();
        let table_like: &dyn TableLike = match given {
            None => &empty,
            Some(item) => match item.as_table_like() {
                Some(t) => t,
                None => {
                    self.push(line, Kind::WrongType, format!("`{path}` must be a table"));
                    return None;
                }
            },
        };
        let place = Place {
            table: table_like,
            path,
            line,
        };
        // A valid base for types with required keys: the required keys with a dummy value.
        let base: Map<String, Value> = backend
            .required
            .iter()
            .map(|(k, _)| ((*k).to_owned(), Value::String("x".into())))
            .collect();
        let (merged, clean) = self.keys_dyn(&place, &backend, &base, &["entra"]);
        let given: Map<String, Value> = merged
            .into_iter()
            .filter(|(k, _)| table_like.contains_key(k))
            .collect();
        let mut with_defaults = backend.table.defaults.clone();
        with_defaults.extend(given.clone());
        let shape_ok = self.shape(&place, &with_defaults, pool);
        if clean && shape_ok {
            let mut whole = given.clone();
            if let Some(entra) = table_like.get("entra") {
                whole.insert("entra".into(), to_json(entra));
            }
            if let Err(message) = (backend.validate)(Value::Object(whole)) {
                let message = message.trim_start_matches("invalid configuration: ");
                let kind = if message.contains("missing field")
                    || message.contains("needs --")
                    || message.contains("is required")
                {
                    Kind::Missing
                } else {
                    Kind::Invalid
                };
                let line = self.mentioned_line(&place, message);
                self.push(line, kind, format!("[{}]: {message}", place.path));
            }
        }
        Some(with_defaults)
    }

    /// [`Checker::keys`] for the backend's own config type.
    fn keys_dyn(
        &mut self,
        place: &Place<'_>,
        backend: &BackendSchema,
        base: &Map<String, Value>,
        nested: &[&str],
    ) -> (Map<String, Value>, bool) {
        match backend.table.name {
            "local" => self.keys::<codalab_wm_core::local::LocalConfig>(
                place,
                &backend.table,
                base,
                nested,
            ),
            #[cfg(feature = "slurm")]
            "slurm_batch" => {
                self.keys::<codalab_wm_slurm::SlurmConfig>(place, &backend.table, base, nested)
            }
            #[cfg(feature = "aws")]
            "aws_batch" => {
                self.keys::<codalab_wm_aws::AwsBatchConfig>(place, &backend.table, base, nested)
            }
            #[cfg(feature = "azure")]
            "azure_batch" => {
                self.keys::<codalab_wm_azure::AzureBatchConfig>(place, &backend.table, base, nested)
            }
            #[cfg(feature = "k8s")]
            "kubernetes" => {
                self.keys::<codalab_wm_k8s::KubernetesConfig>(place, &backend.table, base, nested)
            }
            _ => (base.clone(), true),
        }
    }

    /// The line of the first key of `place` that `message` names (else the table's line).
    fn mentioned_line(&self, place: &Place<'_>, message: &str) -> usize {
        place
            .table
            .iter()
            .map(|(k, _)| k)
            .find(|k| {
                message.contains(&format!("`{k}`"))
                    || message.contains(&format!(".{k}"))
                    || message.contains(&format!(" {k} "))
            })
            .map_or(place.line, |k| self.key_line(place, k))
    }

    /// A worker shape no bundle could use, or a GPU pool without GPUs. Returns whether the
    /// shape is usable.
    fn shape(&mut self, place: &Place<'_>, table: &Map<String, Value>, pool: Option<&str>) -> bool {
        let number = |key: &str| table.get(key).and_then(Value::as_u64).unwrap_or(1);
        let mut ok = true;
        for (key, what) in [("cpus", "CPUs"), ("memory_mb", "memory")] {
            if table.contains_key(key) && number(key) == 0 {
                let line = self.key_line(place, key);
                self.push(
                    line,
                    Kind::Invalid,
                    format!(
                        "`{}` = 0: a worker with no {what} can run no bundle",
                        place.key_path(key)
                    ),
                );
                ok = false;
            }
        }
        let text = |key: &str| {
            table
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_lowercase()
        };
        let why = if pool.is_some_and(|p| p.to_lowercase().contains("gpu")) {
            Some(format!(
                "pool {} is named for GPUs",
                pool.unwrap_or_default()
            ))
        } else if text("partition").contains("gpu") {
            Some(format!(
                "partition {:?} is a GPU partition",
                text("partition")
            ))
        } else if !text("gpu_type").is_empty() {
            Some(format!("gpu_type {:?} is set", text("gpu_type")))
        } else {
            None
        };
        if let Some(why) = why
            && table.contains_key("gpus")
            && number("gpus") == 0
        {
            let line = if place.table.contains_key("gpus") {
                self.key_line(place, "gpus")
            } else {
                place.line
            };
            self.push(
                line,
                Kind::Invalid,
                format!(
                    "[{}]: {why}, but its workers get no GPUs: set `gpus`",
                    place.path
                ),
            );
        }
        ok
    }

    fn pools(&mut self, item: &Item, settings: &Settings, line: usize) {
        let tables: Vec<&dyn TableLike> = match item {
            Item::ArrayOfTables(array) => array.iter().map(|t| t as &dyn TableLike).collect(),
            Item::Value(toml_edit::Value::Array(array)) => array
                .iter()
                .filter_map(|v| v.as_inline_table().map(|t| t as &dyn TableLike))
                .collect(),
            _ => {
                self.push(
                    line,
                    Kind::WrongType,
                    "`pools` must be an array of tables ([[pools]])".into(),
                );
                return;
            }
        };
        let schema = schema::pools();
        let mut owners: Vec<Owner> = Vec::new();
        for (index, table) in tables.into_iter().enumerate() {
            let first = table.iter().next().map(|(k, _)| k.to_owned());
            let place_line = first
                .and_then(|k| table.get_key_value(&k).and_then(|(key, _)| key.span()))
                .map_or(line, |s| line_of(self.text, s.start));
            let place = Place {
                table,
                path: format!("pools[{index}]"),
                line: place_line,
            };
            let base: Map<String, Value> = [
                ("name".to_owned(), Value::String(String::new())),
                ("backend".to_owned(), Value::String(String::new())),
            ]
            .into_iter()
            .collect();
            let (merged, _) =
                self.keys::<PoolSettings>(&place, &schema, &base, &schema::BACKEND_TABLES);
            if let Some(owner) = self.pool(&place, merged, settings) {
                owners.push(owner);
            }
        }
        self.owners(&owners);
    }

    /// One pool: its name, backend, sub-table and rules.
    fn pool(
        &mut self,
        place: &Place<'_>,
        merged: Map<String, Value>,
        settings: &Settings,
    ) -> Option<Owner> {
        for key in ["name", "backend"] {
            if !place.table.contains_key(key) {
                self.push(
                    place.line,
                    Kind::Missing,
                    format!("[[pools]] entry {} needs `{key}`", place.path),
                );
            }
        }
        let entry: PoolSettings = serde_json::from_value(Value::Object(merged)).ok()?;
        let name = entry.name.clone();
        let name_line = self.key_line(place, "name");
        if !place.table.contains_key("name") || !place.table.contains_key("backend") {
            return None;
        }
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            self.push(
                name_line,
                Kind::Invalid,
                format!("pool name `{name}` must be letters, digits and `_`"),
            );
        }
        let backend_line = self.key_line(place, "backend");
        let backend = self.backend_name(&entry.backend, backend_line, "backend")?;
        let table = backend.table.name;
        for (given, _) in place
            .table
            .iter()
            .filter(|(k, _)| schema::BACKEND_TABLES.contains(k))
        {
            if given != table {
                let line = self.key_line(place, given);
                self.push(line, Kind::Invalid, format!("pool {name}: [pools.{given}] does not belong to backend {}; its settings go in [pools.{table}]", entry.backend));
            }
        }
        let given = place.table.get(table);
        let line = given
            .and_then(Item::span)
            .map_or(name_line, |s| line_of(self.text, s.start));
        let path = format!("pools.{table} of pool {name}");
        let values = self.backend_table(table, given, path, line, Some(&name))?;
        let shape = WorkerShape::from_flags(
            values.get("cpus").and_then(Value::as_u64).unwrap_or(1) as u32,
            values.get("gpus").and_then(Value::as_u64).unwrap_or(0) as u32,
            values
                .get("memory_mb")
                .and_then(Value::as_u64)
                .unwrap_or(2048),
        );
        if let Err(message) = entry.check_durations() {
            let line = self.mentioned_line(place, &message);
            self.push(line, Kind::Invalid, message);
        }
        if let Err(message) = entry.policy(settings, shape).validate() {
            let line = self.mentioned_line(place, &message);
            self.push(line, Kind::Invalid, message);
        }
        let mut object: Map<String, Value> = given
            .map(to_json)
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default();
        crate::run::own_jobs(&name, table, &mut object, settings);
        let mut identity = backend.table.defaults.clone();
        identity.extend(object);
        Some(Owner {
            pool: name,
            table,
            line: name_line,
            identity: backend
                .identity
                .iter()
                .map(|k| {
                    (
                        (*k).to_owned(),
                        identity.get(*k).cloned().unwrap_or(Value::Null),
                    )
                })
                .collect(),
        })
    }

    /// Pools that would list (and so count, stop and adopt) each other's jobs.
    fn owners(&mut self, owners: &[Owner]) {
        for (i, a) in owners.iter().enumerate() {
            for b in &owners[i + 1..] {
                if a.pool == b.pool {
                    self.push(
                        b.line,
                        Kind::Invalid,
                        format!("two pools are named {}", b.pool),
                    );
                    continue;
                }
                if a.table != b.table {
                    continue;
                }
                if let Some(why) = shared_jobs(a, b) {
                    self.push(
                        b.line,
                        Kind::Invalid,
                        format!(
                            "pools {} and {} would own each other's jobs: {why}",
                            a.pool, b.pool
                        ),
                    );
                }
            }
        }
    }
}

/// What identifies a pool's jobs on its backend.
struct Owner {
    pool: String,
    table: &'static str,
    line: usize,
    identity: Map<String, Value>,
}

/// Why two pools of the same backend would own each other's jobs, if they would.
fn shared_jobs(a: &Owner, b: &Owner) -> Option<String> {
    let text = |o: &Owner, k: &str| {
        o.identity
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    if a.table == "slurm_batch" {
        let (ja, jb) = (text(a, "job_name"), text(b, "job_name"));
        let prefix = |x: &str, y: &str| format!("{y}-").starts_with(&format!("{x}-"));
        return (prefix(&ja, &jb) || prefix(&jb, &ja)).then(|| {
            format!("job_name `{ja}` and `{jb}` share a prefix (jobs are found by `<user>-<job_name>-`); give them distinct job names")
        });
    }
    let same = a.identity == b.identity;
    same.then(|| {
        let keys: Vec<&str> = a.identity.keys().map(String::as_str).collect();
        format!("the same {} (set one of them apart)", keys.join(", "))
    })
}

/// ` (did you mean `x`?)` for a key close to a known one.
/// ` (did you mean `FIELD`?)` for the field of `fields` nearest to `key`, or nothing.
pub fn suggestion(key: &str, fields: &[&str]) -> String {
    fields
        .iter()
        .map(|f| (distance(key, f), f))
        .filter(|(d, f)| *d <= 2.max(f.len() / 4) || f.starts_with(key) || key.starts_with(*f))
        .min()
        .map_or_else(String::new, |(_, f)| format!(" (did you mean `{f}`?)"))
}

fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(current + 1);
            previous = current;
        }
    }
    row[b.len()]
}
