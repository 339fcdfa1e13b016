//! Clocks, peak memory and summary statistics.

use std::time::Duration;

/// CPU time of this process (all threads), `CLOCK_PROCESS_CPUTIME_ID`: the clock Python's
/// `time.process_time()` reads.
pub fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Median and p99 (nearest rank) of samples in milliseconds, and the best third: the lowest
/// median of the samples' three consecutive thirds. The two cores are shared (the CodaLab
/// services, other builds): a burst of load inflates the CPU time of every tick it overlaps
/// (cache and SMT contention), so the quietest third is the robust figure to compare, for
/// both sides alike.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub p99: f64,
    pub best_third: f64,
    pub samples: usize,
}

/// The nearest-rank quantile `q` of `sorted` (ascending); `None` when it is empty: the
/// simulator's own, so the bench's percentiles and the simulator's agree.
pub use codalab_wm_core::simulate::report::nearest_rank;

/// Median of `samples` (NaN when empty).
fn median_of(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

pub fn summarize(samples: &[f64]) -> Summary {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = |q: f64| nearest_rank(&sorted, q).unwrap_or(f64::NAN);
    let median = median_of(samples);
    let best_third = if samples.len() < 3 {
        median
    } else {
        let third = samples.len() / 3;
        [
            &samples[..third],
            &samples[third..2 * third],
            &samples[2 * third..],
        ]
        .into_iter()
        .map(median_of)
        .fold(f64::INFINITY, f64::min)
    };
    Summary {
        median,
        p99: rank(0.99),
        best_third,
        samples: sorted.len(),
    }
}

impl Summary {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({"median_ms": self.median, "p99_ms": self.p99,
                           "best_third_median_ms": self.best_third, "samples": self.samples})
    }

    pub fn from_json(value: &serde_json::Value) -> Self {
        Self {
            median: value["median_ms"].as_f64().unwrap_or(f64::NAN),
            p99: value["p99_ms"].as_f64().unwrap_or(f64::NAN),
            best_third: value["best_third_median_ms"]
                .as_f64()
                .or_else(|| value["median_ms"].as_f64())
                .unwrap_or(f64::NAN),
            samples: value["samples"].as_u64().unwrap_or(0) as usize,
        }
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_p99() {
        let s = summarize(&[3.0, 1.0, 2.0, 100.0]);
        assert_eq!(s.median, 2.5);
        assert_eq!(s.p99, 100.0);
        let one = summarize(&[7.0]);
        assert_eq!((one.median, one.p99, one.best_third), (7.0, 7.0, 7.0));
    }

    #[test]
    fn best_third_is_the_quietest_stretch() {
        // A burst of load in the middle third.
        let s = summarize(&[10.0, 11.0, 30.0, 31.0, 9.0, 12.0]);
        assert_eq!(s.median, 11.5);
        assert_eq!(s.best_third, 10.5);
        let round_trip = Summary::from_json(&s.json());
        assert_eq!(round_trip.best_third, 10.5);
    }

    #[test]
    fn reads_own_cpu_time() {
        assert!(process_cpu() > Duration::ZERO);
    }
}
