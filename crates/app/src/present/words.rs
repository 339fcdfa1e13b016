//! The words for figures that recur: durations, memory, dates, what a bundle asks for, and why
//! bundles wait.

use codalab_wm_core::pools::{BundleClass, UnmetReason};

/// `3h 02m`, `5m 07s`, `42s`.
pub fn duration(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m {s:02}s"),
        _ => format!("{h}h {m:02}m"),
    }
}

/// `8 GiB`, `512 MiB`, `1.5 GiB`.
pub fn memory(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if bytes >= GIB {
        let gib = bytes as f64 / GIB as f64;
        if bytes.is_multiple_of(GIB) {
            format!("{} GiB", bytes / GIB)
        } else {
            format!("{gib:.1} GiB")
        }
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

/// `2026-11-23 17:05:09 UTC` for seconds since the Unix epoch.
pub fn utc(unix_seconds: u64) -> String {
    let (days, rest) = (unix_seconds / 86_400, unix_seconds % 86_400);
    let (year, month, day) = codalab_wm_core::civil::civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// `4 cpus, 0 gpus, 8 GiB`: a worker's shape or what bundles ask for.
pub(super) fn shape(cpus: u32, gpus: u32, memory_bytes: u64) -> String {
    format!("{cpus} cpus, {gpus} gpus, {}", memory(memory_bytes))
}

/// What a class of bundles asks for: its shape, and its queue when it names one.
pub(super) fn asks(class: &BundleClass) -> String {
    let mut asks = shape(class.cpus, class.gpus, class.memory_bytes);
    if !class.queue.is_empty() {
        asks.push_str(", queue ");
        asks.push_str(&class.queue);
    }
    asks
}

/// Why bundles wait, in words (the code is the row's key).
pub(super) fn unmet(reason: &UnmetReason) -> String {
    match reason {
        UnmetReason::NoFittingPool { detail } => format!("no pool fits them ({detail})"),
        UnmetReason::MaxReached { jobs, max } if *jobs >= *max as usize => {
            format!("the pool is at its max ({jobs} jobs, max {max})")
        }
        UnmetReason::MaxReached { jobs, max } => format!(
            "beyond the pool's max: its room for {} more (jobs: {jobs}, max {max}) goes to bundles ahead",
            *max as usize - jobs
        ),
        UnmetReason::BackingOff { failures, .. } => {
            format!("the pool backs off after {failures} failed launches")
        }
        UnmetReason::Paced { by } => format!("launches are paced ({by})"),
        UnmetReason::WaitingForStarting { starting } => {
            format!("a worker is on its way: {starting} starting in the pool")
        }
        UnmetReason::QuotaExhausted { owner } => {
            format!("their owner (user {owner}) has no parallel_run_quota left for shared workers")
        }
        UnmetReason::OwnWorker { owner } => {
            format!("their owner (user {owner}) is out of quota; their own worker will take them")
        }
        UnmetReason::NotOurs { owner } => {
            format!("owned by user {owner}: the manager's workers are private to its own user")
        }
        UnmetReason::NotStartedByServer { detail }
        | UnmetReason::PoolUnavailable { detail, .. } => detail.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_memory_and_dates_read_compactly() {
        let durations = [(42, "42s"), (307, "5m 07s"), (10_920, "3h 02m")];
        for (seconds, text) in durations {
            assert_eq!(duration(seconds), text);
        }
        let sizes = [
            (8 << 30, "8 GiB"),
            (512 << 20, "512 MiB"),
            (3 << 29, "1.5 GiB"),
        ];
        for (bytes, text) in sizes {
            assert_eq!(memory(bytes), text);
        }
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_795_000_100), "2026-11-18 11:08:20 UTC");
    }

    /// "At its max" only when the jobs are at the max; below it, the room that bundles ahead took.
    #[test]
    fn unmet_max_reached_says_at_its_max_only_at_the_max() {
        let words = |jobs, max| unmet(&UnmetReason::MaxReached { jobs, max });
        assert_eq!(words(3, 3), "the pool is at its max (3 jobs, max 3)");
        assert_eq!(
            words(2, 4),
            "beyond the pool's max: its room for 2 more (jobs: 2, max 4) goes to bundles ahead"
        );
    }
}
