//! Size strings (`512m`, `4g`, `1.5t`, bare bytes): parsing never panics, and a plain number
//! means bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parsed = codalab_wm_core::size::parse_size(&text);
    if let Ok(n) = text.trim().parse::<u64>() {
        assert_eq!(parsed, Ok(n));
    }
    if let Ok(bytes) = parsed {
        let _ = codalab_wm_core::size::HumanBytes(bytes).to_string();
    }
});
