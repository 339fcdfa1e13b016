//! The history's files: one JSON-lines file per UTC day in the history directory, appended
//! by a writer thread of its own (fed through a bounded queue, so a slow disk never slows a
//! tick), pruned by age and size; and reading them back, oldest day first.

use super::Line;
use crate::error::{Error, Result};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

/// How much history is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimits {
    /// Days kept (today's file included); older days' files are deleted.
    pub days: u32,
    /// Bytes kept at most over all days: the oldest days are deleted first; a day that alone
    /// exceeds it is not written further.
    pub max_bytes: u64,
}

impl Default for HistoryLimits {
    fn default() -> Self {
        Self {
            days: 14,
            max_bytes: 256 << 20,
        }
    }
}

/// Batches of lines waiting for the writer at most; beyond, a tick's lines are dropped.
const QUEUE: usize = 256;

/// What the writer thread is sent.
enum Message {
    /// Lines to append.
    Lines(Vec<Line>),
    /// Answer once everything sent before is written.
    Flush(std::sync::mpsc::Sender<()>),
}

/// Where the manager sends its history's lines (see the module doc).
#[derive(Debug, Clone)]
pub struct HistorySink {
    sender: SyncSender<Message>,
    dropped: Arc<AtomicU64>,
    dir: PathBuf,
}

impl HistorySink {
    /// Starts the writer of `dir` (created if missing) with `limits`, pruning what is beyond
    /// them now; `None` when another process writes that history (it holds `dir/.lock`: two
    /// managers' queues in one history would replay as one). Fails when the directory cannot
    /// be created or read.
    pub fn start(dir: &Path, limits: HistoryLimits) -> Result<Option<Self>> {
        let io = |what: &str, e: std::io::Error| {
            Error::InvalidConfig(format!("history {}: cannot {what}: {e}", dir.display()))
        };
        fs::create_dir_all(dir).map_err(|e| io("create it", e))?;
        let lock = (OpenOptions::new().write(true).create(true).truncate(false))
            .open(dir.join(".lock"))
            .map_err(|e| io("open its lock", e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => return Err(io("lock it", e)),
        }
        let mut writer = Writer {
            dir: dir.to_owned(),
            limits,
            day: String::new(),
            full_day: None,
            total: 0,
        };
        writer.prune(&today()).map_err(|e| io("read it", e))?;
        let (sender, receiver) = sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        std::thread::Builder::new()
            .name("history".into())
            .spawn(move || writer.run(receiver, lock))
            .map_err(|e| io("start its writer", e))?;
        Ok(Some(Self {
            sender,
            dropped,
            dir: dir.to_owned(),
        }))
    }

    /// Queues `lines` for the writer; never waits. Lines the full queue cannot take are
    /// dropped and counted ([`HistorySink::dropped`]).
    pub fn send(&self, lines: Vec<Line>) {
        if lines.is_empty() {
            return;
        }
        let count = lines.len() as u64;
        match self.sender.try_send(Message::Lines(lines)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                if self.dropped.fetch_add(count, Ordering::Relaxed) == 0 {
                    tracing::warn!(dir = %self.dir.display(), "the history's writer is behind (a slow or full disk): lines are dropped; `advise` will see a gap");
                }
            }
        }
    }

    /// Waits, at most `bound`, until every line sent before is written (at shutdown: what
    /// the last tick saw is kept). Returns whether it was.
    pub fn flush(&self, bound: std::time::Duration) -> bool {
        let (done, written) = std::sync::mpsc::channel();
        self.sender.send(Message::Flush(done)).is_ok() && written.recv_timeout(bound).is_ok()
    }

    /// Lines dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The history's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The writer thread's state.
struct Writer {
    dir: PathBuf,
    limits: HistoryLimits,
    /// The day of the file written last.
    day: String,
    /// A day that alone exceeds the size limit: not written further.
    full_day: Option<String>,
    /// Bytes of the day files, as of the last prune plus what was written since.
    total: u64,
}

impl Writer {
    /// Writes what it is sent until every sender is gone, holding the history's `lock`.
    fn run(mut self, receiver: Receiver<Message>, lock: fs::File) {
        let _lock = lock;
        let mut failing = false;
        while let Ok(message) = receiver.recv() {
            let lines = match message {
                Message::Lines(lines) => lines,
                Message::Flush(done) => {
                    // The flusher may have stopped waiting.
                    let _ = done.send(());
                    continue;
                }
            };
            match self.write(&today(), &lines) {
                Ok(()) => failing = false,
                Err(error) if !failing => {
                    failing = true;
                    tracing::warn!(dir = %self.dir.display(), %error, "cannot write the history; its lines are dropped until it can");
                }
                Err(_) => {}
            }
        }
    }

    /// Appends `lines` to `day`'s file (pruning first on a new day).
    fn write(&mut self, day: &str, lines: &[Line]) -> std::io::Result<()> {
        let day = day.to_owned();
        if day != self.day {
            self.prune(&day)?;
            self.day = day.clone();
        }
        if self.full_day.as_deref() == Some(day.as_str()) {
            return Ok(());
        }
        let mut text = String::new();
        for line in lines {
            // A line is plain data: it always serializes.
            text.push_str(&serde_json::to_string(line).unwrap_or_default());
            text.push('\n');
        }
        let path = self.dir.join(format!("{day}.jsonl"));
        let size = text.len() as u64;
        if self.total + size > self.limits.max_bytes {
            self.prune_to(&day, self.limits.max_bytes.saturating_sub(size))?;
            if self.total + size > self.limits.max_bytes {
                tracing::warn!(dir = %self.dir.display(), day, max_bytes = self.limits.max_bytes, "today's history alone reaches its size limit (history_max_mb): nothing more is written today");
                self.full_day = Some(day);
                return Ok(());
            }
        }
        let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
        file.write_all(text.as_bytes())?;
        self.total += size;
        Ok(())
    }

    /// Deletes the days older than the limit, then the oldest days other than `today` while
    /// the files exceed the size limit.
    fn prune(&mut self, today: &str) -> std::io::Result<()> {
        self.prune_to(today, self.limits.max_bytes)
    }

    /// [`Writer::prune`], down to `max_bytes`.
    fn prune_to(&mut self, today: &str, max_bytes: u64) -> std::io::Result<()> {
        let days = day_files(&self.dir)?;
        let oldest_kept = oldest_day_kept(today, self.limits.days);
        let mut kept = Vec::new();
        for (day, path) in days {
            if day.as_str() < oldest_kept.as_str() {
                fs::remove_file(&path)?;
            } else {
                kept.push((day, path));
            }
        }
        let mut total: u64 = kept.iter().map(|(_, p)| size_of(p)).sum();
        for (day, path) in &kept {
            if total <= max_bytes || day == today {
                break;
            }
            total -= size_of(path);
            fs::remove_file(path)?;
        }
        self.total = total;
        Ok(())
    }
}

/// The history's day files in `dir`, oldest first.
fn day_files(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut days = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let day = (path.file_name().and_then(|n| n.to_str()))
            .and_then(|n| n.strip_suffix(".jsonl"))
            .filter(|d| is_day(d))
            .map(str::to_owned);
        if let Some(day) = day {
            days.push((day, path));
        }
    }
    days.sort();
    Ok(days)
}

fn is_day(name: &str) -> bool {
    name.len() == 10
        && name.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        })
}

fn size_of(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

/// The UTC date now.
fn today() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    crate::civil::date(now.map_or(0, |d| d.as_secs() as i64))
}

/// The oldest day kept when `days` days are kept up to `today` (`YYYY-MM-DD`).
pub(super) fn oldest_day_kept(today: &str, days: u32) -> String {
    let mut parts = today.splitn(3, '-').map(|p| p.parse::<i64>().unwrap_or(1));
    let (year, month, day) = (
        parts.next().unwrap_or(1970),
        parts.next().unwrap_or(1),
        parts.next().unwrap_or(1),
    );
    let first = crate::civil::days_from_civil(year, month, day) - i64::from(days.max(1)) + 1;
    crate::civil::date(first * 86_400)
}

/// The history in `dir` as one text, oldest day first (what `simulate --trace` and `advise`
/// read). Fails when `dir` cannot be read or holds no day file.
pub fn read_dir(dir: &Path) -> Result<String> {
    let io = |e: std::io::Error| {
        Error::InvalidConfig(format!("cannot read the history {}: {e}", dir.display()))
    };
    let days = day_files(dir).map_err(io)?;
    if days.is_empty() {
        return Err(Error::InvalidConfig(format!(
            "{} holds no history (no YYYY-MM-DD.jsonl file): is it the manager's record_dir/history, and has the manager run with history_days > 0?",
            dir.display()
        )));
    }
    let mut text = String::new();
    for (_, path) in days {
        text.push_str(&fs::read_to_string(&path).map_err(io)?);
    }
    Ok(text)
}

/// A trace file, or every day of a history directory ([`read_dir`]), as one text.
pub fn read(path: &Path) -> Result<String> {
    if path.is_dir() {
        return read_dir(path);
    }
    fs::read_to_string(path)
        .map_err(|e| Error::InvalidConfig(format!("cannot read the trace {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::UnmodelledLine;

    fn line(n: usize) -> Line {
        Line::Unmodelled(UnmodelledLine {
            time: n as f64,
            uuid: format!("0x{n:040}"),
            why: "x".repeat(50),
        })
    }

    fn writer(dir: &Path, days: u32, max_bytes: u64) -> Writer {
        Writer {
            dir: dir.to_owned(),
            limits: HistoryLimits { days, max_bytes },
            day: String::new(),
            full_day: None,
            total: 0,
        }
    }

    fn days(dir: &Path) -> Vec<String> {
        day_files(dir)
            .unwrap()
            .into_iter()
            .map(|(d, _)| d)
            .collect()
    }

    #[test]
    fn days_older_than_the_limit_are_deleted_at_the_first_write_of_a_day() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = writer(dir.path(), 2, 1 << 20);
        for day in ["2026-11-27", "2026-11-28", "2026-11-29"] {
            w.write(day, &[line(1)]).unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), "kept").unwrap();
        assert_eq!(days(dir.path()), ["2026-11-28", "2026-11-29"]);
        w.write("2026-12-01", &[line(2)]).unwrap();
        assert_eq!(
            days(dir.path()),
            ["2026-12-01"],
            "two days: 11-30 and 12-01"
        );
        assert!(
            dir.path().join("notes.txt").exists(),
            "only day files are touched"
        );
        assert_eq!(oldest_day_kept("2026-03-01", 14), "2026-02-16");
    }

    #[test]
    fn the_oldest_days_go_first_and_a_full_day_stops_being_written() {
        let dir = tempfile::tempdir().unwrap();
        let one = serde_json::to_string(&line(1)).unwrap().len() as u64 + 1;
        let mut w = writer(dir.path(), 14, 3 * one);
        w.write("2026-11-28", &[line(1), line(2)]).unwrap();
        w.write("2026-11-29", &[line(3)]).unwrap();
        w.write("2026-11-29", &[line(4)]).unwrap();
        assert_eq!(days(dir.path()), ["2026-11-29"], "the 28th made room");
        w.write("2026-11-29", &[line(5)]).unwrap();
        w.write("2026-11-29", &[line(6)]).unwrap();
        let text = read_dir(dir.path()).unwrap();
        assert_eq!(text.lines().count(), 3, "the day alone is full: {text}");
        assert_eq!(w.full_day.as_deref(), Some("2026-11-29"));
        w.write("2026-11-30", &[line(7)]).unwrap();
        assert_eq!(days(dir.path()), ["2026-11-30"], "a new day makes its room");
    }

    #[test]
    fn reading_takes_the_days_in_order_and_names_an_empty_dir() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("holds no history"), "{err}");
        let mut w = writer(dir.path(), 14, 1 << 20);
        w.write("2026-11-29", &[line(2)]).unwrap();
        w.write("2026-11-28", &[line(1)]).unwrap();
        let times: Vec<f64> = (read_dir(dir.path()).unwrap().lines())
            .map(|l| serde_json::from_str::<Line>(l).unwrap().time())
            .collect();
        assert_eq!(times, [1.0, 2.0]);
    }

    #[test]
    fn the_sink_writes_off_the_callers_thread() {
        let dir = tempfile::tempdir().unwrap();
        let history = dir.path().join("history");
        let sink = HistorySink::start(&history, HistoryLimits::default())
            .unwrap()
            .unwrap();
        let second = HistorySink::start(&history, HistoryLimits::default()).unwrap();
        assert!(second.is_none(), "one writer per history");
        sink.send(vec![line(1)]);
        assert!(sink.flush(std::time::Duration::from_secs(60)));
        let text = read_dir(&dir.path().join("history")).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert_eq!(sink.dropped(), 0);
    }
}
