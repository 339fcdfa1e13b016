//! A systemd unit file read as systemd reads the parts the tests use: its `[Service]` keys,
//! `ExecStart=` split into words with `${NAME}` expanded, `Environment=`/`EnvironmentFile=`,
//! and whether `Restart=`/`RestartPreventExitStatus=`/`SuccessExitStatus=` bring the service
//! back after an exit (systemd.service(5), "Table 2. Exit causes and the effect of the
//! Restart= settings").

use std::collections::BTreeMap;
use std::path::Path;

/// The `(section, key, value)` lines of a unit file, in order.
#[derive(Debug)]
pub struct Unit {
    lines: Vec<(String, String, String)>,
}

impl Unit {
    /// Parses `text`: comments (`#`, `;`) and blank lines skipped, `\` continues a line.
    pub fn parse(text: &str) -> Self {
        let (mut lines, mut section, mut pending) = (Vec::new(), String::new(), String::new());
        for raw in text.lines() {
            let line = raw.trim();
            if pending.is_empty() && (line.is_empty() || line.starts_with(['#', ';'])) {
                continue;
            }
            if let Some(continued) = line.strip_suffix('\\') {
                pending.push_str(continued);
                pending.push(' ');
                continue;
            }
            let line = std::mem::take(&mut pending) + line;
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_owned();
            } else if let Some((key, value)) = line.split_once('=') {
                lines.push((section.clone(), key.trim().into(), value.trim().into()));
            } else {
                panic!("not a unit file line: {line:?}");
            }
        }
        Self { lines }
    }

    /// Every value of `[Service]` `key`, in order.
    pub fn all(&self, key: &str) -> Vec<&str> {
        (self.lines.iter())
            .filter(|(section, k, _)| section == "Service" && k == key)
            .map(|(_, _, value)| value.as_str())
            .collect()
    }

    /// The last value of `[Service]` `key` (systemd: the last assignment wins).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.all(key).last().copied()
    }

    /// A boolean `[Service]` key.
    pub fn yes(&self, key: &str) -> bool {
        matches!(self.get(key), Some("yes" | "true" | "on" | "1"))
    }

    /// `ExecStart=`'s words, its prefixes (`-@:+!`) dropped and `${NAME}` expanded from `env`.
    pub fn exec_start(&self, env: &BTreeMap<String, String>) -> Vec<String> {
        let line = self.get("ExecStart").expect("the unit has an ExecStart=");
        let line = line.trim_start_matches(['-', '@', ':', '+', '!']);
        words(line)
            .into_iter()
            .map(|word| expand(&word, env))
            .collect()
    }

    /// The environment `Environment=` sets, then each `EnvironmentFile=` (a leading `-`:
    /// optional) as `file(path)` gives its text.
    pub fn environment(&self, file: impl Fn(&str) -> Option<String>) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for value in self.all("Environment") {
            for word in words(value) {
                let (key, value) = word.split_once('=').expect("Environment=KEY=value");
                env.insert(key.to_owned(), value.to_owned());
            }
        }
        for value in self.all("EnvironmentFile") {
            let (optional, path) = match value.strip_prefix('-') {
                Some(path) => (true, path),
                None => (false, value),
            };
            let Some(text) = file(path) else {
                assert!(optional, "EnvironmentFile={path} is missing");
                continue;
            };
            for line in text.lines().map(str::trim) {
                if line.is_empty() || line.starts_with(['#', ';']) {
                    continue;
                }
                let (key, value) = line.split_once('=').expect("KEY=value");
                env.insert(
                    key.trim().to_owned(),
                    value.trim().trim_matches('"').to_owned(),
                );
            }
        }
        env
    }

    /// Whether systemd starts the service again after `exit` (not a `systemctl stop`).
    pub fn restarts_after(&self, exit: Exit) -> bool {
        let listed = |key: &str| {
            (self.all(key).into_iter())
                .flat_map(str::split_whitespace)
                .any(|item| exit.is(item))
        };
        if listed("RestartPreventExitStatus") {
            return false;
        }
        let clean = match exit {
            Exit::Code(code) => code == 0 || listed("SuccessExitStatus"),
            Exit::Signal(signal) => {
                [
                    libc_signal::HUP,
                    libc_signal::INT,
                    libc_signal::TERM,
                    libc_signal::PIPE,
                ]
                .contains(&signal)
                    || listed("SuccessExitStatus")
            }
        };
        let signal = matches!(exit, Exit::Signal(_));
        match self.get("Restart").unwrap_or("no") {
            "always" => true,
            "on-success" => clean,
            "on-failure" => !clean,
            "on-abnormal" | "on-abort" => signal && !clean,
            "no" | "on-watchdog" => false,
            other => panic!("Restart={other} is not a systemd value"),
        }
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    pub fn of(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            (None, None) => unreachable!("{status:?}"),
        }
    }

    /// Whether an item of an exit status list (`2`, `SIGKILL`, `KILL`) names this exit.
    fn is(self, item: &str) -> bool {
        match self {
            Exit::Code(code) => item.parse() == Ok(code),
            Exit::Signal(signal) => {
                libc_signal::number(item.trim_start_matches("SIG")) == Some(signal)
            }
        }
    }
}

/// The signal numbers of Linux the tests meet.
pub mod libc_signal {
    pub const HUP: i32 = 1;
    pub const INT: i32 = 2;
    pub const ABRT: i32 = 6;
    pub const KILL: i32 = 9;
    pub const PIPE: i32 = 13;
    pub const TERM: i32 = 15;

    pub fn number(name: &str) -> Option<i32> {
        Some(match name {
            "HUP" => HUP,
            "INT" => INT,
            "ABRT" => ABRT,
            "KILL" => KILL,
            "PIPE" => PIPE,
            "TERM" => TERM,
            _ => return None,
        })
    }
}

/// Splits a unit's command line or assignment list into words: whitespace separates, double
/// or single quotes group.
fn words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quote, mut started) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => (quote, started) = (Some(c), true),
            (None, c) if c.is_whitespace() => {
                if started || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            (None, c) => word.push(c),
        }
    }
    if started || !word.is_empty() {
        words.push(word);
    }
    words
}

/// `${NAME}` in `word` replaced by `env`'s value (systemd's expansion in `ExecStart=`).
fn expand(word: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').expect("`${` closed") + start;
        let name = &rest[start + 2..end];
        out.push_str(env.get(name).map_or("", String::as_str));
        rest = &rest[end + 1..];
    }
    out + rest
}

/// `path` (absolute, as the unit names it) inside the test's stand-in root `root`.
pub fn under(root: &Path, path: &str) -> std::path::PathBuf {
    root.join(path.trim_start_matches('/'))
}
