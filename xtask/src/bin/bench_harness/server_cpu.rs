//! The CPU time the REAL CodaLab server spends: its REST server (gunicorn's master and worker
//! processes) and its MariaDB, read from `/proc/PID/stat` (user and system time of every
//! thread, and of the children they have reaped: the REST worker starts short-lived helpers),
//! as recorded by `xtask/services/codalab/up.sh` in `.services/codalab/run/*.pid`. Also compiled
//! into `bench-ours`, which reads it around its own ticks.

use anyhow::{Context, Result};
use std::path::Path;

/// The server's root processes: MariaDB and the REST server (whose children are found at each
/// read, see [`cpu_ms`]).
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
    Ok(vec![read("mariadbd.pid")?, read("rest-server.pid")?])
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

/// CPU time so far of the `roots` and of their children (gunicorn's worker), reaped
/// grandchildren included, in milliseconds (10 ms steps: the kernel counts in clock ticks).
/// A root that is gone is an error (the server restarted); a child that just exited is skipped
/// (its time moves to its parent once reaped).
pub fn cpu_ms(roots: &[u32]) -> Result<f64> {
    let ticks_per_second = rustix::param::clock_ticks_per_second() as f64;
    let mut ticks = 0u64;
    for &root in roots {
        let path = format!("/proc/{root}/stat");
        let stat = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {path} (did the server restart?)"))?;
        ticks += stat_cpu_ticks(&stat).with_context(|| format!("parsing {path}"))?;
        for child in children(root) {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            ticks += stat_cpu_ticks(&stat).unwrap_or(0);
        }
    }
    Ok(ticks as f64 * 1000.0 / ticks_per_second)
}

/// utime + stime + cutime + cstime of a `/proc/PID/stat` line (fields 14 to 17; the command
/// name, field 2, may hold spaces and parentheses, so fields are counted after its last `)`).
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    (11..15).map(|i| fields.get(i)?.parse::<u64>().ok()).sum()
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
        let stat = "26477 (python (x) y) S 1 26477 26477 0 -1 4194560 9 0 0 0 120 30 4 1 20 0 2";
        assert_eq!(stat_cpu_ticks(stat), Some(155));
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
