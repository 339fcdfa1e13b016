//! What a reload may not change, checked before any backend is built again: the settings the
//! running process holds (the server, credentials, TLS, logging, `--listen`, the record dir,
//! the webhooks), and for each pool its backend and the keys by which it finds the jobs it
//! started. (Pools added or removed are refused by [`Manager::reconfigure`] itself.)
//!
//! [`Manager::reconfigure`]: crate::Manager::reconfigure

use super::PoolLayout;
use crate::error::{Error, Result};
use crate::manager::DRAIN_THEN_RESTART;
use crate::settings::Settings;
use serde_json::Value;

/// The settings, as the config file names them, that a running process holds from its start.
const FIXED: [&str; 13] = [
    "server",
    "worker_server",
    "password_file",
    "ca_cert",
    "insecure_skip_tls_verify",
    "log_format",
    "verbose",
    "once",
    "backend",
    "listen",
    "listen_hosts",
    "record_dir",
    "history_days",
];

/// Refuses a new configuration that changes a setting the process holds from its start (the
/// server, credentials, TLS, logging, `listen`, the record dir …) or the `[[notify]]` webhooks:
/// the error names the setting, its old and new values, and what a restart to apply it would
/// cost when it would orphan the jobs running now.
pub fn check_fixed_settings(old: &Settings, new: &Settings) -> Result<()> {
    if old.notify != new.notify {
        return invalid("`[[notify]]` cannot change while the manager runs: restart it to apply");
    }
    let (Ok(Value::Object(a)), Ok(Value::Object(b))) =
        (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return Ok(());
    };
    let Some(key) = FIXED.into_iter().find(|key| a.get(*key) != b.get(*key)) else {
        return Ok(());
    };
    let show = |v: Option<&Value>| v.map_or_else(|| "unset".to_owned(), Value::to_string);
    // Changes after which a restarted manager would not find the jobs running now: the backend;
    // the workers' server (`server` unless `worker_server` is set) and CodaLab user, the origin
    // by which slurm-batch, kubernetes and gce list their jobs; the records of its launches.
    let orphans = match key {
        "backend" => Some("a manager restarted on another backend no longer sees"),
        "server" | "worker_server" | "password_file" => Some(
            "if the workers' server or CodaLab user changes with it, a slurm-batch, kubernetes \
             or gce manager restarted so no longer sees",
        ),
        "record_dir" => Some("a manager restarted so no longer knows it launched"),
        _ => None,
    };
    let orphans = orphans
        .map(|who| format!("; {who} the jobs running now ({DRAIN_THEN_RESTART})"))
        .unwrap_or_default();
    invalid(format!(
        "`{key}` cannot change while the manager runs ({} → {}): restart it to apply{orphans}",
        show(a.get(key)),
        show(b.get(key))
    ))
}

impl PoolLayout {
    /// Refuses `new` as this pool's layout when the manager would lose track of the jobs it
    /// started: another backend, or another value of a key that says which jobs are its own
    /// ([`BackendKind::identity`](crate::describe::BackendKind::identity)).
    pub fn check_same_jobs(&self, new: &PoolLayout) -> Result<()> {
        let name = &new.policy.name;
        let (was, is) = (self.kind.name(), new.kind.name());
        if was != is {
            return invalid(format!(
                "pool {name}: the backend cannot change from {was} to {is} while running: its \
                 jobs would be orphaned ({DRAIN_THEN_RESTART})"
            ));
        }
        for key in new.kind.identity() {
            let value = |p: &PoolLayout| p.table.get(key).cloned().unwrap_or(Value::Null);
            let (was, is) = (value(self), value(new));
            if was != is {
                return invalid(format!(
                    "pool {name}: `{}.{key}` cannot change while running ({was} → {is}): the \
                     manager would lose track of the jobs it started ({DRAIN_THEN_RESTART})",
                    new.kind.table()
                ));
            }
        }
        Ok(())
    }
}

fn invalid(message: impl Into<String>) -> Result<()> {
    Err(Error::InvalidConfig(message.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `check_fixed_settings` says of the default settings changed by `change` ("" when
    /// it takes them).
    fn refused(change: impl FnOnce(&mut Settings)) -> String {
        let old = Settings::default();
        let mut new = old.clone();
        change(&mut new);
        match check_fixed_settings(&old, &new) {
            Err(error) => error.to_string(),
            Ok(()) => String::new(),
        }
    }

    fn webhook() -> crate::notify::NotifySettings {
        serde_json::from_value(serde_json::json!({"url": "http://127.0.0.1:1/hook"})).unwrap()
    }

    #[track_caller]
    fn says(error: String, key: &str, why: &str) {
        assert!(
            error.contains(&format!("`{key}` cannot change while the manager runs"))
                && error.contains(why),
            "{key}: {error}"
        );
    }

    #[test]
    fn process_settings_are_refused_with_what_restarting_costs_and_policy_settings_pass() {
        let server = refused(|s| s.server = "http://127.0.0.1:2".into());
        says(server, "server", "no longer sees the jobs running now");
        let listen = refused(|s| s.listen = "127.0.0.1:9".parse().ok());
        says(listen, "listen", "restart it to apply");
        let records = refused(|s| s.record_dir = Some("/elsewhere".into()));
        says(records, "record_dir", "no longer knows it launched");
        says(refused(|s| s.history_days = 1), "history_days", "restart");
        says(refused(|s| s.verbose = !s.verbose), "verbose", "restart");
        says(
            refused(|s| s.notify.push(webhook())),
            "[[notify]]",
            "restart",
        );
        assert_eq!(refused(|s| s.max_workers = 7), "");
        assert_eq!(refused(|s| s.sleep_time = 1), "");
        assert_eq!(refused(|s| s.search = vec![".mine".into()]), "");
    }
}
