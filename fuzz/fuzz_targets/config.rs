//! Config files: a TOML document extracted with figment into the `[slurm_batch]` and `[local]`
//! tables (as the CLI layers them) and validated: an error, never a panic.
#![no_main]

use figment::Figment;
use figment::providers::{Format, Toml};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let figment = Figment::from(Toml::string(text));
    if let Ok(slurm) = figment
        .focus("slurm_batch")
        .extract::<codalab_wm_slurm::SlurmConfig>()
        && let Ok(settings) = slurm.validate()
    {
        assert!(!settings.partition.is_empty());
        let _ = settings.job_name_prefix();
        let _ = settings.worker_shape().to_string();
    }
    let _ = figment
        .focus("local")
        .extract::<codalab_wm_core::local::LocalConfig>();
});
