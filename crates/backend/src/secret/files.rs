//! Secrets as files: a directory whose files hold the manager's secrets, so that none has to
//! be on a command line or in an environment (`ps`, `docker inspect` and `/proc` show both).
//! The directory is `CODALAB_WM_SECRETS_DIR`, else systemd's `$CREDENTIALS_DIRECTORY`
//! (`LoadCredential=`); Docker's secrets (`/run/secrets`) and a Kubernetes Secret mounted as a
//! volume are such directories. Each file is named for what it holds:
//!
//! - `codalab-username`, `codalab-password`: the manager's CodaLab credentials (the keys of
//!   the Kubernetes Secret the worker pods read too);
//! - `TABLE.KEY`: a key of a backend's table, as the config file spells it
//!   (`kubernetes.auth_token`, `azure_batch.account_key`): a layer over the config file, under
//!   `CODALAB_WM_*` and the flags, in the single-backend mode (with `[[pools]]` such a file is
//!   an error: the pools' tables are read from the config file alone).
//!
//! Names starting with `.` (a Kubernetes volume's `..data`) are skipped; any other name is an
//! error, as is a file others may read. A file's value is its text without the final newline.

use super::Secret;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The environment variable that names the secrets directory.
pub const SECRETS_DIR_ENV: &str = "CODALAB_WM_SECRETS_DIR";
/// The file of the CodaLab user name.
pub const USERNAME_FILE: &str = "codalab-username";
/// The file of the CodaLab password.
pub const PASSWORD_FILE: &str = "codalab-password";

/// The secrets directory, when one is given.
pub fn dir() -> Option<PathBuf> {
    [SECRETS_DIR_ENV, "CREDENTIALS_DIRECTORY"]
        .iter()
        .filter_map(std::env::var_os)
        .find(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// One file of the secrets directory.
#[derive(Debug)]
pub struct SecretFile {
    /// Its name: `codalab-username`, `codalab-password` or `TABLE.KEY`.
    pub name: String,
    /// What it holds.
    pub value: Secret,
    /// Where it is.
    pub path: PathBuf,
}

/// The names and paths of `dir`'s files, those starting with `.` skipped.
fn entries(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let bad = |e: std::io::Error| {
        Error::InvalidConfig(format!("secrets dir {} cannot be read: {e}", dir.display()))
    };
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(bad)? {
        let entry = entry.map_err(bad)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            entries.push((name, entry.path()));
        }
    }
    entries.sort();
    Ok(entries)
}

/// The files of `dir` (names in `only`, when given), each read.
fn read_files(dir: &Path, only: impl Fn(&str) -> bool) -> Result<Vec<SecretFile>> {
    let mut files = Vec::new();
    for (name, path) in entries(dir)?.into_iter().filter(|(n, _)| only(n)) {
        let value = read_file(&path).map_err(|why| {
            Error::InvalidConfig(format!("secrets dir {}: file `{name}`{why}", dir.display()))
        })?;
        files.push(SecretFile { name, value, path });
    }
    Ok(files)
}

/// The files of `dir`, each name checked; `tables` are the backend tables a `TABLE.KEY` may
/// name.
pub fn read(dir: &Path, tables: &[&str]) -> Result<Vec<SecretFile>> {
    for (name, _) in entries(dir)? {
        check_name(&name, tables).map_err(|why| {
            Error::InvalidConfig(format!(
                "secrets dir {}: file `{name}`: {why}",
                dir.display()
            ))
        })?;
    }
    read_files(dir, |_| true)
}

/// Whether `name` is one a secrets file may have.
fn check_name(name: &str, tables: &[&str]) -> std::result::Result<(), String> {
    if name == USERNAME_FILE || name == PASSWORD_FILE {
        return Ok(());
    }
    let key_like = |s: &str| {
        !s.is_empty()
            && (s.chars()).all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    match name.split_once('.') {
        Some((table, key)) if tables.contains(&table) && key_like(key) => Ok(()),
        Some((table, _)) if !tables.contains(&table) => Err(format!(
            "`{table}` is no backend table (tables: {})",
            tables.join(", ")
        )),
        _ => Err(format!(
            "name it {USERNAME_FILE}, {PASSWORD_FILE} or TABLE.KEY (a key of a backend table, \
             as the config file spells it, e.g. kubernetes.auth_token)"
        )),
    }
}

/// A regular file's text (symbolic links followed, as a Kubernetes volume's are), without
/// its final newline; refused when others may read it. The error completes "file NAME".
fn read_file(path: &Path) -> std::result::Result<Secret, String> {
    let text = super::read_guarded(path, 0o007, "")?;
    let value = text.strip_suffix('\n').unwrap_or(&text);
    Ok(Secret::new(value.strip_suffix('\r').unwrap_or(value)))
}

/// The secrets directory's `TABLE.KEY` files of backend table `table`, as a settings layer
/// (empty without a directory).
pub fn layer(table: &str) -> Result<figment::Figment> {
    let mut figment = figment::Figment::new();
    let Some(dir) = dir() else {
        return Ok(figment);
    };
    let prefix = format!("{table}.");
    for file in read_files(&dir, |name| name.starts_with(&prefix))? {
        figment = figment.merge(file);
    }
    Ok(figment)
}

/// A `TABLE.KEY` file as a provider: an error in its value names the file.
impl figment::Provider for SecretFile {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::from("secrets dir", figment::Source::File(self.path.clone()))
    }

    fn data(
        &self,
    ) -> std::result::Result<
        figment::value::Map<figment::Profile, figment::value::Dict>,
        figment::Error,
    > {
        figment::providers::Serialized::default(&self.name, self.value.expose()).data()
    }
}

/// Every file of the secrets directory checked (at start and at each reload, before any is
/// used): `tables` are the backend tables; `pools`: the config declares `[[pools]]`, whose
/// backend tables are read from the config file alone, so a `TABLE.KEY` file would be unused.
pub fn check(tables: &[&str], pools: bool) -> Result<()> {
    let Some(dir) = dir() else {
        return Ok(());
    };
    let files = read(&dir, tables)?;
    match files.iter().find(|f| f.name.contains('.')) {
        Some(file) if pools => Err(Error::InvalidConfig(format!(
            "secrets dir {}: file `{}`: TABLE.KEY files set the backend table of the \
             single-backend mode; with [[pools]] give each pool's key in its table of the \
             config file",
            dir.display(),
            file.name
        ))),
        _ => Ok(()),
    }
}

/// The CodaLab credentials the secrets directory holds, if it holds them.
pub fn credentials() -> Result<Option<(String, Secret)>> {
    let Some(dir) = dir() else {
        return Ok(None);
    };
    let files = read_files(&dir, |n| n == USERNAME_FILE || n == PASSWORD_FILE)?;
    let (mut username, mut password) = (None, None);
    for file in files {
        match file.name.as_str() {
            USERNAME_FILE => username = Some(file.value.expose().trim().to_owned()),
            _ => password = Some(file.value),
        }
    }
    match (username, password) {
        (Some(u), Some(p)) if !u.is_empty() && !p.is_empty() => Ok(Some((u, p))),
        (None, None) => Ok(None),
        _ => Err(Error::InvalidConfig(format!(
            "secrets dir {}: give both {USERNAME_FILE} and {PASSWORD_FILE}, neither empty",
            dir.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn write(dir: &Path, name: &str, text: &str, mode: u32) {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn files_are_credentials_or_table_keys_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let tables = ["kubernetes", "azure_batch"];
        write(dir.path(), "codalab-password", "pw\n", 0o440);
        write(dir.path(), "kubernetes.auth_token", "tok", 0o400);
        std::fs::create_dir(dir.path().join("..data")).unwrap();
        let files = read(dir.path(), &tables).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["codalab-password", "kubernetes.auth_token"]);
        assert_eq!(
            files[0].value.expose(),
            "pw",
            "the final newline is not the secret's"
        );

        for (name, mode, says) in [
            (
                "password",
                0o400,
                "name it codalab-username, codalab-password or TABLE.KEY",
            ),
            (
                "slurm.key",
                0o400,
                "`slurm` is no backend table (tables: kubernetes, azure_batch)",
            ),
            ("kubernetes.Auth", 0o400, "name it"),
            (
                "azure_batch.account_key",
                0o644,
                "is accessible by others (mode 644)",
            ),
        ] {
            let bad = tempfile::tempdir().unwrap();
            write(bad.path(), name, "x", mode);
            let error = read(bad.path(), &tables).unwrap_err().to_string();
            assert!(error.contains(says) && error.contains(name), "{error}");
        }
    }
}
