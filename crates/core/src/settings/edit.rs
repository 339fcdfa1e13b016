//! What-if edits (`simulate --set [POOL.]KEY=VALUE`): one setting changed as if the config file
//! said so, read through the same layers, types and checks as the file. With `[[pools]]`, `KEY`
//! is a key of a pool's entry (`max`, `spill_after`, `fallback` …) or of its backend table
//! (`slurm_batch.cpus`), in the pool named `POOL` or, without it, in every pool; without
//! `[[pools]]`, a top-level key (`max_workers`) or the backend's (`slurm_batch.cpus`). `VALUE`
//! is a TOML value (a bare word is a string); an empty `VALUE` removes the key, as if the
//! file did not set it (`spill_after=`: no spill).

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use std::str::FromStr;

/// One `--set [POOL.]KEY=VALUE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    /// As given, for errors.
    text: String,
    /// `POOL`, `KEY` and any table, split at the dots.
    path: Vec<String>,
    /// `None`: remove the key.
    value: Option<Value>,
}

impl std::fmt::Display for Edit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--set `{}`", self.text)
    }
}

impl FromStr for Edit {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let invalid = |why: &str| format!("invalid --set `{text}`: {why}");
        let (key, value) = text
            .split_once('=')
            .ok_or_else(|| invalid("expected [POOL.]KEY=VALUE"))?;
        let path: Vec<String> = key.trim().split('.').map(str::to_owned).collect();
        if path.iter().any(String::is_empty) {
            return Err(invalid("an empty name in [POOL.]KEY"));
        }
        let value = value.trim();
        let value = (!value.is_empty()).then(|| toml_value(value));
        Ok(Self {
            text: text.to_owned(),
            path,
            value,
        })
    }
}

/// `value` as the config file would read it after `key = `; not TOML (a bare word): the
/// string itself.
fn toml_value(value: &str) -> Value {
    Toml::string(&format!("v = {value}"))
        .data()
        .ok()
        .and_then(|mut data| data.remove(&Profile::Default))
        .and_then(|mut dict| dict.remove("v"))
        .unwrap_or_else(|| Value::from(value.to_owned()))
}

impl Edit {
    /// Whether it names one of `tables` first (a backend table, outside `[[pools]]`).
    pub fn in_table(&self, tables: &[&str]) -> bool {
        tables.contains(&self.path[0].as_str())
    }

    /// Applies it to the merged settings `dict`: to its `[[pools]]` entries when it has some,
    /// else at the top, where an edit of a backend table (one of `tables`) is left to that
    /// table's own layers ([`super::Layers::tables_with`]).
    fn apply(&self, dict: &mut Dict, tables: &[&str]) -> Result<(), String> {
        let Some(Value::Array(_, pools)) = dict.get_mut("pools").filter(|p| !is_empty(p)) else {
            if !self.in_table(tables) {
                self.set(dict, &self.path);
            }
            return Ok(());
        };
        let named = |entry: &Value, name: &str| {
            entry
                .as_dict()
                .and_then(|d| d.get("name"))
                .and_then(Value::as_str)
                == Some(name)
        };
        let first = &self.path[0];
        if self.path.len() > 1 && pools.iter().any(|entry| named(entry, first)) {
            for entry in pools.iter_mut().filter(|entry| named(entry, first)) {
                if let Value::Dict(_, entry) = entry {
                    self.set(entry, &self.path[1..]);
                }
            }
            return Ok(());
        }
        if self.path.len() > 2 || (self.path.len() == 2 && !self.in_table(tables)) {
            let names: Vec<&str> = pools
                .iter()
                .filter_map(|e| e.as_dict()?.get("name")?.as_str())
                .collect();
            return Err(format!(
                "--set `{}`: no pool named {first} (pools: {})",
                self.text,
                names.join(", ")
            ));
        }
        // No POOL: every pool, or, for a backend table's key, every pool that has that table.
        let takes = |entry: &Value| {
            self.path.len() == 1 || entry.as_dict().is_some_and(|d| d.contains_key(first))
        };
        if !pools.iter().any(takes) {
            return Err(format!(
                "--set `{}`: no pool has a `{first}` table; name the pool (POOL.{})",
                self.text,
                self.path.join(".")
            ));
        }
        for entry in pools.iter_mut().filter(|entry| takes(entry)) {
            if let Value::Dict(_, entry) = entry {
                self.set(entry, &self.path);
            }
        }
        Ok(())
    }

    /// Sets (or removes) `path` in `dict`, making the tables on the way.
    fn set(&self, dict: &mut Dict, path: &[String]) {
        let (last, tables) = path.split_last().expect("a path has a key");
        let mut dict = dict;
        for table in tables {
            let entry = dict
                .entry(table.clone())
                .or_insert_with(|| Value::from(Dict::new()));
            if entry.as_dict().is_none() {
                *entry = Value::from(Dict::new());
            }
            let Value::Dict(_, inner) = entry else {
                unreachable!("made a table above")
            };
            dict = inner;
        }
        match &self.value {
            Some(value) => {
                dict.insert(last.clone(), value.clone());
            }
            None => {
                dict.remove(last);
            }
        }
    }
}

fn is_empty(value: &Value) -> bool {
    matches!(value, Value::Array(_, items) if items.is_empty())
}

/// `base` with `edits` applied to its merged data, as a layer of its own (errors name
/// `--set`); `tables` are the backend tables (`[[pools]]` entries hold theirs; without
/// `[[pools]]`, they are read apart).
pub struct Edited<'a> {
    pub base: Figment,
    pub edits: &'a [Edit],
    pub tables: &'a [&'a str],
}

impl Provider for Edited<'_> {
    fn metadata(&self) -> Metadata {
        Metadata::named("--set")
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut data = self.base.data()?;
        for dict in data.values_mut() {
            for edit in self.edits {
                edit.apply(dict, self.tables)
                    .map_err(figment::Error::from)?;
            }
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::Serialized;

    fn edited(toml: &str, edits: &[&str]) -> Result<serde_json::Value, String> {
        let edits: Vec<Edit> = edits.iter().map(|e| e.parse()).collect::<Result<_, _>>()?;
        let base = Figment::from(Toml::string(toml));
        Figment::from(Edited {
            base,
            edits: &edits,
            tables: &["local"],
        })
        .extract::<serde_json::Value>()
        .map_err(|e| e.to_string())
    }

    const POOLS: &str = "[[pools]]\nname = \"a\"\nmax = 2\n[pools.local]\ncpus = 1\n\n\
                         [[pools]]\nname = \"b\"\nmax = 3\nspill_after = 60\n";

    #[test]
    fn a_key_changes_in_the_named_pool_or_in_every_pool() {
        let one = edited(POOLS, &["b.max=9"]).unwrap();
        assert_eq!(one["pools"][0]["max"], 2);
        assert_eq!(one["pools"][1]["max"], 9);
        let all = edited(POOLS, &["max=7"]).unwrap();
        assert_eq!(
            (
                all["pools"][0]["max"].clone(),
                all["pools"][1]["max"].clone()
            ),
            (7.into(), 7.into())
        );
        let table = edited(POOLS, &["a.local.cpus=4", "b.local.cpus=2"]).unwrap();
        assert_eq!(table["pools"][0]["local"]["cpus"], 4);
        assert_eq!(table["pools"][1]["local"]["cpus"], 2);
        // A table's key without POOL: the pools that have the table (b has none).
        let tables = edited(POOLS, &["local.cpus=6"]).unwrap();
        assert_eq!(tables["pools"][0]["local"]["cpus"], 6);
        assert!(tables["pools"][1].get("local").is_none());
    }

    #[test]
    fn values_read_as_the_file_reads_them_and_an_empty_one_removes_the_key() {
        let v = edited(
            POOLS,
            &[
                "a.launch_mode=compat",
                "a.cost=1.5",
                "a.tag=\"gpu\"",
                "b.spill_after=",
            ],
        )
        .unwrap();
        assert_eq!(v["pools"][0]["launch_mode"], "compat");
        assert_eq!(v["pools"][0]["cost"], 1.5);
        assert_eq!(v["pools"][0]["tag"], "gpu");
        assert!(v["pools"][1].get("spill_after").is_none());
    }

    #[test]
    fn without_pools_a_key_is_a_top_level_one() {
        let v = edited("max_workers = 2\n", &["max_workers=5", "min_workers=1"]).unwrap();
        assert_eq!(
            (v["max_workers"].clone(), v["min_workers"].clone()),
            (5.into(), 1.into())
        );
        let base = Figment::from(Serialized::defaults(serde_json::json!({"pools": []})));
        let edits = ["max_workers=5".parse::<Edit>().unwrap()];
        let v: serde_json::Value = Figment::from(Edited {
            base,
            edits: &edits,
            tables: &["local"],
        })
        .extract()
        .unwrap();
        assert_eq!(v["max_workers"], 5);
    }

    #[test]
    fn bad_edits_are_named() {
        assert_eq!(
            "max".parse::<Edit>().unwrap_err(),
            "invalid --set `max`: expected [POOL.]KEY=VALUE"
        );
        assert_eq!(
            "a..max=1".parse::<Edit>().unwrap_err(),
            "invalid --set `a..max=1`: an empty name in [POOL.]KEY"
        );
        for edit in ["c.local.cpus=1", "c.max=1"] {
            let unknown = edited(POOLS, &[edit]).unwrap_err();
            let expected = format!("--set `{edit}`: no pool named c (pools: a, b)");
            assert!(unknown.contains(&expected), "{unknown}");
        }
    }
}
