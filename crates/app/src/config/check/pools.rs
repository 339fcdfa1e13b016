//! `[[pools]]` entries: each pool's name, backend, sub-table and rules, then the pools that
//! would own each other's jobs.

use super::toml::{line_of, to_json};
use super::{Checker, Kind, Place};
use crate::config::schema;
use codalab_wm_core::WorkerShape;
use codalab_wm_core::describe::{BackendKind, Placement};
use codalab_wm_core::layout;
use codalab_wm_core::pools::fallback;
use codalab_wm_core::settings::{PoolRules, PoolSettings, Settings};
use serde_json::{Map, Value};
use toml_edit::{Item, TableLike};

impl Checker<'_> {
    pub(super) fn pools(&mut self, item: &Item, settings: &Settings, line: usize) {
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
            let tables: Vec<&str> = self.catalogue().tables().collect();
            let (merged, _) = self.keys::<PoolRules>(&place, &schema, &base, &tables);
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
        let rules: PoolRules = serde_json::from_value(Value::Object(merged)).ok()?;
        let name = rules.name.clone();
        let name_line = self.key_line(place, "name");
        if !place.table.contains_key("name") || !place.table.contains_key("backend") {
            return None;
        }
        if let Err(message) = layout::check_pool_name(&name) {
            self.push(name_line, Kind::Invalid, message);
        }
        let backend_line = self.key_line(place, "backend");
        let backend = self.backend_name(&rules.backend, backend_line, "backend")?;
        let table = backend.table();
        let entry = PoolSettings {
            rules,
            tables: place
                .table
                .iter()
                .filter(|(k, _)| self.catalogue().by_table(k).is_some())
                .map(|(k, item)| (k.to_owned(), to_json(item)))
                .collect(),
        };
        if let Err(message) = layout::pool_table(&entry, backend, self.catalogue()) {
            let line = self.mentioned_line(place, &message);
            self.push(line, Kind::Invalid, message);
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
        let problems = [
            entry.rules.check_durations(),
            entry.rules.policy(settings, shape).validate(),
        ];
        for message in problems.into_iter().filter_map(Result::err) {
            let line = self.mentioned_line(place, &message);
            self.push(line, Kind::Invalid, message);
        }
        let mut identity = values;
        identity.extend(backend.placement_defaults(Placement {
            pool: Some(&name),
            password_file: settings.password_file.as_deref(),
        }));
        if let Some(Value::Object(object)) = given.map(to_json) {
            identity.extend(object);
        }
        let fallback =
            (entry.rules.fallback.clone()).map(|f| (f, self.key_line(place, "fallback")));
        Some(Owner {
            pool: name,
            backend,
            line: name_line,
            identity,
            fallback,
        })
    }

    /// Pools that would list (and so count, stop and adopt) each other's jobs, and fallbacks
    /// that name no pool.
    fn owners(&mut self, owners: &[Owner]) {
        let names: Vec<&str> = owners.iter().map(|o| o.pool.as_str()).collect();
        for owner in owners {
            let Some((fallback, line)) = &owner.fallback else {
                continue;
            };
            if let Some(message) = fallback::unknown(&owner.pool, fallback, &names) {
                self.push(*line, Kind::Invalid, message);
            }
        }
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
                if a.backend.name() != b.backend.name() {
                    continue;
                }
                if let Some(why) = a.backend.shares_jobs(&a.identity, &b.identity) {
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

/// What identifies a pool's jobs on its backend: its table over the defaults.
struct Owner {
    pool: String,
    backend: &'static dyn BackendKind,
    line: usize,
    identity: Map<String, Value>,
    /// The pool its `fallback` names, and the key's line.
    fallback: Option<(String, usize)>,
}
