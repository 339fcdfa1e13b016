//! `config check FILE`: every problem of a config file, with its line, without contacting
//! anything. The file is parsed with `toml_edit` (which keeps spans), then checked table by
//! table: each key on its own against the type of the struct the table deserializes into (so
//! one wrong key does not hide the next), each backend table with the backend's own config
//! type and `validate()`, then the combinations no manager could run with.

mod accounts;
mod pools;
mod toml;

use toml::line_of;
pub use toml::to_json;

use super::schema::{self, PLACEHOLDER, Program};
use codalab_wm_core::describe::{BackendKind, Catalogue, TableSchema};
use codalab_wm_core::layout;
use codalab_wm_core::settings::{Settings, WorkerSettings, suggestion};
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
    /// Runs, but likely not as meant (the file still passes).
    Warning,
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
            Kind::Warning => "warning",
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
pub fn check(text: &str, program: &Program) -> Vec<Diagnostic> {
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
        program,
        found: Vec::new(),
        manager_user: None,
    };
    checker.placeholders(document.as_item(), "");
    checker.file(document.as_table());
    let mut found = checker.found;
    found.sort_by_key(|d| d.line);
    found.dedup();
    found
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
    program: &'t Program,
    text: &'t str,
    found: Vec<Diagnostic>,
    /// The manager's CodaLab user, when the settings and environment tell it.
    manager_user: Option<String>,
}

impl<'t> Checker<'t> {
    fn catalogue(&self) -> &'t Catalogue {
        &self.program.catalogue
    }

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

    /// [`Checker::keys_with`] for the type `T` the table deserializes into.
    fn keys<T: DeserializeOwned>(
        &mut self,
        place: &Place<'_>,
        schema: &TableSchema,
        base: &Map<String, Value>,
        nested: &[&str],
    ) -> (Map<String, Value>, bool) {
        let parse = |v: Value| {
            serde_json::from_value::<T>(v)
                .map(drop)
                .map_err(|e| e.to_string())
        };
        self.keys_with(place, schema, base, nested, &parse)
    }

    /// Checks each key of `place` against `schema` and `parse` (on top of `base`, a valid
    /// table); returns `base` with every valid key of the table set.
    fn keys_with(
        &mut self,
        place: &Place<'_>,
        schema: &TableSchema,
        base: &Map<String, Value>,
        nested: &[&str],
        parse: &dyn Fn(Value) -> Result<(), String>,
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
            match parse(Value::Object(candidate.clone())) {
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
        let top = schema::top(self.program);
        let catalogue = self.catalogue();
        let mut nested: Vec<&str> = catalogue.tables().collect();
        nested.extend(["worker", "pools"]);
        let (merged, _) = self.keys::<Settings>(&place, &top, &top.defaults, &nested);
        let settings: Settings =
            serde_json::from_value(Value::Object(merged.clone())).unwrap_or_default();
        self.globals(&place, &settings);
        self.manager_user = accounts::manager_user(settings.password_file.as_deref());
        if let Some(item) = root.get("worker") {
            self.worker(item, &settings);
        }
        let backend = settings.backend.as_deref();
        let chosen = catalogue.entries().iter().find(|e| Some(e.name) == backend);
        for table in catalogue.tables() {
            let given = root.get(table);
            let is_chosen = chosen.is_some_and(|e| e.table == table);
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
        if let Err(problem) = layout::single_flags(settings).validate() {
            let line = self.mentioned_line(place, &problem);
            self.push(line, Kind::Invalid, problem);
        }
        for checked in [
            settings.check_durations(),
            settings.check_budgets_and_notify(),
            settings.check_search_request(),
            settings.check_listen_hosts(),
        ] {
            if let Err(message) = checked {
                let line = self.mentioned_line(place, &message);
                self.push(line, Kind::Invalid, message);
            }
        }
        let records = settings.record_dir();
        if codalab_wm_core::settings::is_under_temp_dir(&records) {
            let line = match place.table.contains_key("record_dir") {
                true => self.key_line(place, "record_dir"),
                false => 1,
            };
            self.push(
                line,
                Kind::Warning,
                format!(
                    "the launch records go to {} (`record_dir`, --record-dir), in the temporary directory, which a reboot or systemd's PrivateTmp= empties: a restarted manager would no longer know the jobs it launched nor its budget's day; set `record_dir` to a kept dir (under systemd, StateDirectory= gives $STATE_DIRECTORY, the default)",
                    records.display()
                ),
            );
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
    fn backend_name(
        &mut self,
        name: &str,
        line: usize,
        key: &str,
    ) -> Option<&'static dyn BackendKind> {
        let catalogue = self.catalogue();
        let message = match catalogue.entries().iter().find(|e| e.name == name) {
            Some(entry) if entry.kind.is_some() => return entry.kind,
            Some(entry) => format!(
                "`{key}` = {name:?}: not compiled in: rebuild with `--features {}`",
                entry.feature
            ),
            None => format!(
                "`{key}` = {name:?} is not a backend: use one of {}",
                catalogue.names().join(", ")
            ),
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
        let schema = schema::worker(self.program);
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
        let catalogue = self.catalogue();
        let entry = catalogue.by_table(table);
        let Some(backend) = entry.and_then(|e| e.kind) else {
            let feature = entry.map_or("full", |e| e.feature);
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
            .required()
            .iter()
            .map(|(k, _)| ((*k).to_owned(), Value::String("x".into())))
            .collect();
        let schema = backend.schema();
        let nested: Vec<&str> = backend.subtables().iter().map(|(n, _)| *n).collect();
        let (merged, clean) =
            self.keys_with(&place, &schema, &base, &nested, &|v| backend.parse(&v));
        let given: Map<String, Value> = merged
            .into_iter()
            .filter(|(k, _)| table_like.contains_key(k))
            .collect();
        let mut with_defaults = schema.defaults.clone();
        with_defaults.extend(given.clone());
        let shape_ok = self.shape(&place, &with_defaults, pool);
        if clean && shape_ok {
            let mut whole = given.clone();
            for name in &nested {
                if let Some(item) = table_like.get(name) {
                    whole.insert((*name).into(), to_json(item));
                }
            }
            if let Err(message) = backend.validate(&Value::Object(whole)) {
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
        if let Some(why) = accounts::workers_file_problem(&given, self.manager_user.as_deref()) {
            let line = self.key_line(&place, "password_file");
            self.push(line, Kind::Invalid, format!("[{}]: {why}", place.path));
        }
        Some(with_defaults)
    }

    /// The line of the first key of `place` that `message` names (else the table's line).
    /// (The key the message names first, as `key`, `.key`, ` key ` or its flag `--key`.)
    fn mentioned_line(&self, place: &Place<'_>, message: &str) -> usize {
        let position = |k: &str| {
            [
                format!("`{k}`"),
                format!(".{k}"),
                format!(" {k} "),
                format!("--{}", k.replace('_', "-")),
            ]
            .iter()
            .filter_map(|form| message.find(form.as_str()))
            .min()
        };
        place
            .table
            .iter()
            .filter_map(|(k, _)| position(k).map(|at| (at, k)))
            .min()
            .map_or(place.line, |(_, k)| self.key_line(place, k))
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
}
