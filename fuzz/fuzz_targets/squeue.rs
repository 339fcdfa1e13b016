//! `squeue` output (the one listing per tick): parsing never panics, and every job it keeps
//! carries the owner prefix and a job id made of digits, `_`, `[` and `]`.
#![no_main]

use libfuzzer_sys::fuzz_target;

const PREFIX: &str = "root-codalab-slurm-worker-";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(jobs) = codalab_wm_slurm::squeue::parse(&text, PREFIX) {
        for job in jobs {
            assert!(job.name.starts_with(PREFIX), "{job:?}");
            assert!(!job.id.is_empty(), "{job:?}");
        }
    }
    for line in text.lines() {
        let _ = codalab_wm_slurm::squeue::parse_time(line);
        let _ = codalab_wm_slurm::squeue::job_state(line);
    }
});
