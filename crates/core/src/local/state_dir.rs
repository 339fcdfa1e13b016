//! The local backend's state directory: created private (0700), refused when group or others
//! may write it (the manager trusts the pids in its records), and held by one manager at a
//! time through an exclusive `flock` on `<state-dir>/lock`, which holds the holder's pid.
//!
//! Two managers on one state dir would each count only the workers they see and together
//! exceed `--max-workers`; the second one is refused at start. Within one process the lock is
//! shared: a reload that builds the backend again keeps it.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

/// Name of the lock file inside the state dir.
pub(super) const LOCK_FILE: &str = "lock";

/// The exclusive hold of this process on a state dir; released when the last backend using it
/// is dropped (or the process ends).
#[derive(Debug)]
pub(crate) struct StateLock {
    _file: File,
}

/// Locks held by this process, by state dir.
static HELD: Mutex<Option<HashMap<PathBuf, Weak<StateLock>>>> = Mutex::new(None);

fn invalid(message: String) -> Error {
    Error::InvalidConfig(message)
}

/// Creates `dir` (0700) if needed, checks its permissions and takes its lock.
pub(crate) fn prepare(dir: &Path) -> Result<Arc<StateLock>> {
    crate::settings::create_private_dir(dir).map_err(|e| {
        invalid(format!(
            "cannot create local state dir {}: {e}",
            dir.display()
        ))
    })?;
    check_permissions(dir)?;
    let key = dir.canonicalize().map_err(|e| {
        invalid(format!(
            "cannot resolve local state dir {}: {e}",
            dir.display()
        ))
    })?;
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    let held = held.get_or_insert_with(HashMap::new);
    if let Some(lock) = held.get(&key).and_then(Weak::upgrade) {
        return Ok(lock);
    }
    let lock = Arc::new(lock(dir)?);
    held.insert(key, Arc::downgrade(&lock));
    Ok(lock)
}

/// Refuses a state dir that is not a directory or that group or others may write.
fn check_permissions(dir: &Path) -> Result<()> {
    let metadata = std::fs::metadata(dir).map_err(|e| {
        invalid(format!(
            "cannot read local state dir {}: {e}",
            dir.display()
        ))
    })?;
    if !metadata.is_dir() {
        return Err(invalid(format!(
            "local state dir {} is not a directory",
            dir.display()
        )));
    }
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(invalid(format!(
            "local state dir {} is writable by group or others (mode {mode:04o}): anyone who \
             can write it could make this manager signal any process through a forged worker \
             record; run `chmod 700 {}`",
            dir.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// Takes the exclusive lock on `<dir>/lock` and writes this process's pid into it.
fn lock(dir: &Path) -> Result<StateLock> {
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| invalid(format!("cannot open {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "another process".to_owned(),
                pid => format!("pid {pid}"),
            };
            return Err(invalid(format!(
                "local state dir {} is in use by another manager ({holder}, holding {}): two \
                 managers on one state dir would together exceed --max-workers; stop that \
                 one or give this one its own --state-dir",
                dir.display(),
                path.display()
            )));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(invalid(format!("cannot lock {}: {e}", path.display())));
        }
    }
    let written = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    written.map_err(|e| invalid(format!("cannot write {}: {e}", path.display())))?;
    Ok(StateLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_a_private_dir_and_shares_the_lock_within_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("a/b");
        let first = prepare(&state).unwrap();
        let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let again = prepare(&state).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let pid = std::fs::read_to_string(state.join(LOCK_FILE)).unwrap();
        assert_eq!(pid.trim(), std::process::id().to_string());
        let lock_mode = std::fs::metadata(state.join(LOCK_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(lock_mode & 0o777, 0o600);
    }

    #[test]
    fn a_dir_others_may_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = prepare(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("writable by group or others (mode 0777)"),
            "{err}"
        );
        assert!(err.contains("chmod 700"), "{err}");
    }
}
