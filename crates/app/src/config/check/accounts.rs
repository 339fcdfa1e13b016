//! `config check`'s word on the workers' account, where the file alone tells it: a backend
//! table's own `password_file` (Slurm's: the workers' credentials, apart from the manager's
//! login) that names another CodaLab user than the manager's. The same rule as at start
//! ([`codalab_wm_core::backend::account_mismatch`]); a relative path is read by each job in
//! its own directory, so it is not judged here, nor is a file this host cannot read.

use codalab_wm_core::backend::account_mismatch;
use codalab_wm_core::secret::Credentials;
use serde_json::{Map, Value};
use std::path::Path;

/// The manager's CodaLab user, as a run logs in: the global `password_file`'s first line,
/// else `CODALAB_USERNAME`; `None` when neither can be read.
pub(super) fn manager_user(password_file: Option<&Path>) -> Option<String> {
    Credentials::load(password_file).ok().map(|c| c.username)
}

/// What is wrong with the workers' `password_file` of a backend `table`, if anything.
pub(super) fn workers_file_problem(
    table: &Map<String, Value>,
    manager: Option<&str>,
) -> Option<String> {
    let file = table.get("password_file")?.as_str()?;
    let path = Path::new(file);
    if !path.is_absolute() {
        return None;
    }
    let workers = Credentials::load(Some(path)).ok()?.username;
    let why = account_mismatch(&workers, manager?)?;
    Some(format!("`password_file` {file}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file(dir: &Path, name: &str, user: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, format!("{user}\npw\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path.display().to_string()
    }

    #[test]
    fn another_user_in_an_absolute_readable_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let manager = manager_user(Some(Path::new(&file(dir.path(), "m", "bob"))));
        assert_eq!(manager.as_deref(), Some("bob"));
        let table = |path: &str| {
            let mut map = Map::new();
            map.insert("password_file".into(), Value::String(path.into()));
            map
        };
        let root = file(dir.path(), "w", "codalab");
        let problem = workers_file_problem(&table(&root), Some("bob")).unwrap();
        assert!(
            problem
                .contains("the workers log in as CodaLab user `codalab` but the manager as `bob`"),
            "{problem}"
        );
        let same = file(dir.path(), "s", "bob");
        for (path, manager) in [
            (same.as_str(), Some("bob")),
            (root.as_str(), Some("codalab")),
            (root.as_str(), None),
            ("w", Some("bob")),
            ("/nonexistent/pw", Some("bob")),
        ] {
            assert_eq!(workers_file_problem(&table(path), manager), None, "{path}");
        }
        assert_eq!(workers_file_problem(&Map::new(), Some("bob")), None);
    }
}
