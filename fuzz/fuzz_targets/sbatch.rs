//! `sbatch --parsable` output: a job id is all digits, or the output is refused.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(id) = codalab_wm_slurm::backend::parse_submitted(&text) {
        assert!(
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
            "{id:?}"
        );
    }
});
