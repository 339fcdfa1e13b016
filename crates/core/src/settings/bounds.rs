//! The range of every duration setting, and the size of the staged search the settings make:
//! the error names the flag and the config key.

use super::{PoolRules, Settings};

/// The longest duration any setting may give, in seconds (a year): far above any sane value,
/// far below where adding it to a clock overflows.
pub const MAX_SECONDS: u64 = 365 * 24 * 60 * 60;

/// A duration setting to check: its flag (empty for config-only keys), its config key, the
/// value given and the least value allowed.
struct Bound {
    flag: &'static str,
    key: String,
    value: u64,
    min: u64,
}

impl Settings {
    /// Every duration setting in its sane range (`sleep_time` ≥ 1, every one ≤ [`MAX_SECONDS`]);
    /// the error names the flag and the config key. `restart_after_seconds = 0` means off.
    pub fn check_durations(&self) -> Result<(), String> {
        let bound = |flag, key: &str, value, min| Bound {
            flag,
            key: key.to_owned(),
            value,
            min,
        };
        let mut bounds = vec![
            bound("--sleep-time", "sleep_time", self.sleep_time, 1),
            bound(
                "--min-seconds-between-workers",
                "min_seconds_between_workers",
                self.min_seconds_between_workers,
                0,
            ),
            bound(
                "--worker-checkin-timeout",
                "worker_checkin_timeout",
                self.worker_checkin_timeout,
                1,
            ),
            bound(
                "--worker-idle-seconds",
                "worker.idle_seconds",
                self.worker.idle_seconds,
                0,
            ),
        ];
        let optional = [
            (
                "--restart-after-seconds",
                "restart_after_seconds",
                self.restart_after_seconds,
            ),
            (
                "--worker-checkin-frequency-seconds",
                "worker.checkin_frequency_seconds",
                self.worker.checkin_frequency_seconds,
            ),
        ];
        for (flag, key, value) in optional {
            bounds.extend(value.map(|v| bound(flag, key, v, 0)));
        }
        bounds.iter().try_for_each(Bound::check)?;
        self.check_history()?;
        self.pools
            .iter()
            .try_for_each(|p| p.rules.check_durations())
    }
}

impl Settings {
    /// `history_days` at most a year; `history_max_mb` at least 1 when a history is kept.
    fn check_history(&self) -> Result<(), String> {
        if self.history_days > 366 {
            return Err(format!(
                "`history_days` is {}: keep at most 366 days (0: no history)",
                self.history_days
            ));
        }
        if self.history_days > 0 && !(1..=1 << 20).contains(&self.history_max_mb) {
            return Err(format!(
                "`history_max_mb` is {}: it must be between 1 and 1048576 (history_days = 0 keeps no history)",
                self.history_max_mb
            ));
        }
        Ok(())
    }
}

impl PoolRules {
    /// The pool's duration settings (the keys marked `seconds` in [`PoolRules::KEYS`]) in
    /// their range (≤ [`MAX_SECONDS`]).
    pub fn check_durations(&self) -> Result<(), String> {
        for (key, value) in self.seconds() {
            Bound {
                flag: "",
                key: format!("pools.{key}` of pool `{}", self.name),
                value,
                min: 0,
            }
            .check()?;
        }
        if let Some(key) = self.fallback_keys_alone() {
            return Err(format!(
                "pool {}: `{key}` needs `fallback` (the pool new launches go to)",
                self.name
            ));
        }
        Ok(())
    }
}

impl Bound {
    fn check(&self) -> Result<(), String> {
        if (self.min..=MAX_SECONDS).contains(&self.value) {
            return Ok(());
        }
        let name = if self.flag.is_empty() {
            format!("`{}`", self.key)
        } else {
            format!("{} (`{}` in the config file)", self.flag, self.key)
        };
        Err(format!(
            "{name} is {} seconds: it must be between {} and {MAX_SECONDS} (a year)",
            self.value, self.min
        ))
    }
}

impl Settings {
    /// The budget keys (numbers ≥ 0; a cost limit needs a cost per hour somewhere) and every
    /// `[[notify]]` entry (an http(s) URL, known event codes); the error names the key.
    pub fn check_budgets_and_notify(&self) -> Result<(), String> {
        let overall = crate::budget::BudgetLimits {
            max_worker_hours_per_day: self.max_worker_hours_per_day,
            max_cost_per_day: self.max_cost_per_day,
        };
        overall.validate(self.cost_per_hour)?;
        let costed = self.cost_per_hour.is_some()
            || self.pools.iter().any(|p| p.rules.cost_per_hour.is_some());
        if self.max_cost_per_day.is_some() && !costed {
            return Err("max_cost_per_day needs cost_per_hour (at the top level for the single backend, or per pool)".into());
        }
        if self.cost_per_hour.is_some() && !self.pools.is_empty() {
            return Err("with [[pools]], set cost_per_hour per pool, not at the top level".into());
        }
        self.notify
            .iter()
            .enumerate()
            .try_for_each(|(index, hook)| hook.validate(index))
    }
}

impl Settings {
    /// The staged bundle search within the request line CodaLab's server accepts
    /// ([`crate::codalab::limits::MAX_REQUEST_LINE_BYTES`]): `search` and, in the single-backend
    /// mode with `tag_exclusive`, `worker.tag` (sent twice) are in its URL. The user is not known
    /// here (the password file is read later), so the search is the longer one of a user other
    /// than `codalab` (with `.mine`). A bad `server` is left to the check that names it.
    pub fn check_search_request(&self) -> Result<(), String> {
        use crate::codalab::{SEARCH_PAGE_SIZE, limits, longest_search_line, staged_keywords};
        let single = self.pools.is_empty();
        let exclusive = single && self.worker.tag_exclusive;
        let tag = self.worker.tag.as_deref().filter(|_| single);
        let keywords = staged_keywords(&self.search, "", tag, exclusive);
        let Ok(line) = longest_search_line(&self.server, &keywords, SEARCH_PAGE_SIZE) else {
            return Ok(());
        };
        if line <= limits::MAX_REQUEST_LINE_BYTES {
            return Ok(());
        }
        let search = self.search.iter().map(String::len).sum::<usize>();
        let mut shorten = vec![format!("`search` (--search, {search} bytes)")];
        if let Some(tag) = tag.filter(|t| exclusive && !t.is_empty()) {
            let tag = tag.len();
            shorten.push(format!(
                "`worker.tag` (--worker-tag, {tag} bytes, sent twice with `worker.tag_exclusive`)"
            ));
        }
        Err(limits::request_line_too_long(line, &shorten.join(" or ")))
    }
}

#[cfg(test)]
mod tests {
    use crate::describe::{BackendKind, Catalogue, Entry};
    use crate::settings::Layers;

    fn catalogue() -> Catalogue {
        let local: &'static dyn BackendKind = &crate::local::KIND;
        Catalogue::new(vec![Entry {
            name: local.name(),
            table: local.table(),
            feature: "",
            kind: Some(local),
        }])
    }

    /// A config file whose `search` is `search_bytes` long, with `tail` after it.
    fn file(search_bytes: usize, tail: &str) -> String {
        let search = format!("name={}", "x".repeat(search_bytes - 5));
        format!(
            "server = \"http://127.0.0.1:2900\"\nbackend = \"local\"\nsearch = [\"{search}\"]\n{tail}"
        )
    }

    /// What reading the file as at start and at a reload says.
    fn read(text: &str) -> Result<(), String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wm.toml");
        std::fs::write(&path, text).unwrap();
        let layers = Layers {
            file: Some(path),
            flags: figment::Figment::new(),
            backend: None,
        };
        layers
            .settings(&catalogue())
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// A search the server would refuse (gunicorn's 4,094-byte request line) is refused when
    /// the settings are read (start, reload), naming the setting (`config check` says so on
    /// its line: cli's tests/config.rs); one that fits, at the largest offset and page,
    /// passes. No server is contacted.
    #[test]
    fn a_search_longer_than_the_server_accepts_is_refused_when_read() {
        let long = file(4000, "");
        let error = read(&long).unwrap_err();
        assert!(
            error.contains("`search` (--search, 4000 bytes)") && error.contains("4094"),
            "{error}"
        );
        assert_eq!(read(&file(3800, "")), Ok(()));

        // The exclusive tag is sent twice.
        let tagged = file(
            2000,
            &format!(
                "[worker]\ntag = \"{}\"\ntag_exclusive = true\n",
                "t".repeat(1000)
            ),
        );
        let error = read(&tagged).unwrap_err();
        assert!(
            error.contains("`worker.tag` (--worker-tag, 1000 bytes"),
            "{error}"
        );
        assert_eq!(read(&tagged.replace("true", "false")), Ok(()));
    }
}
