//! Where settings come from: built-in defaults, then `--config FILE` (TOML), then the secrets
//! directory's `TABLE.KEY` files ([`crate::secret::files`]), then `CODALAB_WM_*` environment
//! variables (`__` separates tables), then flags. The global settings and the
//! backend tables are read apart: [`Settings`] knows no backend, and each backend reads its own
//! table ([`BackendKind::read`]) from [`Layers::tables`]. Errors name the key as the file
//! spells it and where it came from ([`invalid`](crate::error::invalid)).

use super::Settings;
use super::edit::{Edit, Edited};
use crate::describe::{BackendKind, Catalogue};
use crate::error::{ENV_PREFIX, Error, Result, invalid};
use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Map};
use figment::{Figment, Metadata, Profile, Provider};
use std::path::PathBuf;

/// The layers a manager's settings come from, kept so that a reload reads them again.
#[derive(Debug, Clone)]
pub struct Layers {
    /// `--config FILE`.
    pub file: Option<PathBuf>,
    /// The global flags given (a layer over everything else).
    pub flags: Figment,
    /// The backend named on the command line, with the flags given for its table.
    pub backend: Option<(&'static dyn BackendKind, serde_json::Value)>,
}

impl Layers {
    /// The global settings (backend tables set apart), every duration in its range.
    pub fn settings(&self, catalogue: &Catalogue) -> Result<Settings> {
        self.settings_with(catalogue, &[])
    }

    /// [`Self::settings`] with what-if `edits` over every layer ([`Edit`]), read and checked
    /// as the file is.
    pub fn settings_with(&self, catalogue: &Catalogue, edits: &[Edit]) -> Result<Settings> {
        let tables: Vec<&'static str> = catalogue.tables().collect();
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(path) = self.file()? {
            figment = figment.merge(Without::new(Toml::file_exact(path), &tables));
        }
        figment = figment.merge(Without::new(env(), &tables));
        figment = figment.merge(self.flags.clone());
        let extract = |edits: &[Edit]| -> Result<Settings> {
            // Without edits, the layers themselves: an error names where a key came from.
            let edited = match edits {
                [] => figment.clone(),
                _ => Figment::from(Edited {
                    base: figment.clone(),
                    edits,
                    tables: &tables,
                }),
            };
            edited.extract().map_err(|e| invalid(e, None))
        };
        let settings = extract(edits).map_err(|error| {
            // Name the first edit the settings do not take (a serde error inside a
            // `[[pools]]` entry names the entry, not its key).
            let blamed = (1..=edits.len()).find(|n| extract(&edits[..*n]).is_err());
            match (blamed, error) {
                (Some(n), Error::InvalidConfig(why)) => {
                    Error::InvalidConfig(format!("with {}: {why}", edits[n - 1]))
                }
                (_, error) => error,
            }
        })?;
        settings.check_durations().map_err(Error::InvalidConfig)?;
        settings
            .check_budgets_and_notify()
            .map_err(Error::InvalidConfig)?;
        settings
            .check_search_request()
            .map_err(Error::InvalidConfig)?;
        settings
            .check_listen_hosts()
            .map_err(Error::InvalidConfig)?;
        crate::secret::files::check(&tables, !settings.pools.is_empty())?;
        Ok(settings)
    }

    /// Where the single backend `kind`'s table is read from: the file, the environment and
    /// the backend's flags, over `defaults` (what its placement decides).
    pub fn tables(
        &self,
        kind: &dyn BackendKind,
        defaults: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Figment> {
        let mut figment = Figment::from(Serialized::defaults(table(kind.table(), defaults)));
        if let Some(path) = self.file()? {
            figment = figment.merge(Toml::file_exact(path));
        }
        figment = figment.merge(crate::secret::files::layer(kind.table())?);
        figment = figment.merge(env());
        if let Some((kind, flags)) = &self.backend {
            figment = figment.merge(Serialized::defaults(table(kind.table(), flags.clone())));
        }
        Ok(figment)
    }

    /// [`Self::tables`] with the what-if `edits` of `kind`'s table (`TABLE.KEY=VALUE`, without
    /// `[[pools]]`) over every layer; an edit of another backend's table (one `catalogue`
    /// knows) is an error, not ignored.
    pub fn tables_with(
        &self,
        kind: &dyn BackendKind,
        defaults: serde_json::Map<String, serde_json::Value>,
        edits: &[Edit],
        catalogue: &Catalogue,
    ) -> Result<Figment> {
        let known: Vec<&str> = catalogue.tables().collect();
        if let Some(edit) =
            (edits.iter()).find(|e| e.in_table(&known) && !e.in_table(&[kind.table()]))
        {
            return Err(Error::InvalidConfig(format!(
                "{edit}: the single backend is {}, whose table is [{}]",
                kind.name(),
                kind.table()
            )));
        }
        let figment = self.tables(kind, defaults)?;
        let ours: Vec<Edit> = (edits.iter())
            .filter(|e| e.in_table(&[kind.table()]))
            .cloned()
            .collect();
        if ours.is_empty() {
            return Ok(figment);
        }
        Ok(Figment::from(Edited {
            base: figment,
            edits: &ours,
            tables: &[],
        }))
    }

    /// Whether the global setting `key` was given (the file, `CODALAB_WM_*` or a flag),
    /// whatever its value: a default's value given explicitly counts as given.
    pub fn given(&self, key: &str) -> Result<bool> {
        let mut figment = Figment::new();
        if let Some(path) = self.file()? {
            figment = figment.merge(Toml::file_exact(path));
        }
        Ok(figment.merge(env()).merge(self.flags.clone()).contains(key))
    }

    fn file(&self) -> Result<Option<&PathBuf>> {
        match &self.file {
            Some(path) if !path.is_file() => Err(Error::InvalidConfig(format!(
                "config file {} does not exist",
                path.display()
            ))),
            file => Ok(file.as_ref()),
        }
    }
}

/// `{table: value}`.
fn table(name: &str, value: impl Into<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({ name: value.into() })
}

/// `CODALAB_WM_*`; `CODALAB_WM_LOG` is the log filter and `CODALAB_WM_SECRETS_DIR` the
/// secrets directory ([`crate::secret::files`]), not settings.
fn env() -> Env {
    Env::prefixed(ENV_PREFIX)
        .ignore(&["LOG", "SECRETS_DIR"])
        .split("__")
}

/// A provider without some top-level keys (the backend tables, read apart).
struct Without<P> {
    inner: P,
    keys: Vec<&'static str>,
}

impl<P> Without<P> {
    fn new(inner: P, keys: &[&'static str]) -> Self {
        Self {
            inner,
            keys: keys.to_vec(),
        }
    }
}

impl<P: Provider> Provider for Without<P> {
    fn metadata(&self) -> Metadata {
        self.inner.metadata()
    }

    fn data(&self) -> std::result::Result<Map<Profile, Dict>, figment::Error> {
        let mut data = self.inner.data()?;
        for dict in data.values_mut() {
            for key in &self.keys {
                dict.remove(*key);
            }
        }
        Ok(data)
    }
}
