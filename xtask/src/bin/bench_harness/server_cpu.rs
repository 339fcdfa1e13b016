//! The CPU time the REAL CodaLab server spends: its REST server (gunicorn's master and worker
//! processes) and its MariaDB, read from `/proc/PID/stat` (user + system time of every thread),
//! as recorded by `xtask/services/codalab/up.sh` in `.services/codalab/run/*.pid`. Also compiled
//! into `bench-ours`, which reads it around its own ticks.

use anyhow::{Context, Result};
use std::path::Path;

/// The server's processes: the REST server, its descendants (gunicorn's worker), MariaDB.
pub fn server_pids(services: &Path) -> Result<Vec<u32>> {
    let run = services.join("codalab/run");
    let read = |name: &str| -> Result<u32> {
        let path = run.join(name);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {} (is the codalab service up?)", path.display()))?;
        text.trim()
            .parse()
            .with_context(|| format!("{} holds no pid", path.display()))
    };
    let mut pids = vec![read("mariadbd.pid")?];
    let mut todo = vec![read("rest-server.pid")?];
    while let Some(pid) = todo.pop() {
        pids.push(pid);
        todo.extend(children(pid));
    }
    Ok(pids)
}

/// The children of `pid`, from every thread's `children` list.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// User + system CPU time of `pids` so far, in milliseconds (10 ms steps: the kernel counts in
/// clock ticks).
pub fn cpu_ms(pids: &[u32]) -> Result<f64> {
    let ticks_per_second = rustix::param::clock_ticks_per_second() as f64;
    let mut ticks = 0u64;
    for pid in pids {
        let path = format!("/proc/{pid}/stat");
        let stat = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {path} (did the server restart?)"))?;
        ticks += stat_cpu_ticks(&stat).with_context(|| format!("parsing {path}"))?;
    }
    Ok(ticks as f64 * 1000.0 / ticks_per_second)
}

/// utime + stime of a `/proc/PID/stat` line (fields 14 and 15; the command name, field 2, may
/// hold spaces and parentheses, so fields are counted after its last `)`).
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// `--server-pids` as the children get them.
pub fn pids_arg(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `--server-pids a,b,c` back into pids.
pub fn parse_pids(arg: &str) -> Result<Vec<u32>> {
    arg.split(',')
        .map(|p| {
            p.parse()
                .with_context(|| format!("bad pid `{p}` in --server-pids"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat = "26477 (python (x) y) S 1 26477 26477 0 -1 4194560 9 0 0 0 120 30 0 0 20 0 2";
        assert_eq!(stat_cpu_ticks(stat), Some(150));
        assert_eq!(stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn own_process_cpu_is_read() {
        let me = std::process::id();
        assert!(cpu_ms(&[me]).unwrap() >= 0.0);
        assert_eq!(parse_pids(&pids_arg(&[1, 22, 333])).unwrap(), [1, 22, 333]);
        assert!(parse_pids("1,x").is_err());
    }
}
