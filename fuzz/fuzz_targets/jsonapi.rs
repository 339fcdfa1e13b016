//! `/rest/bundles` replies: any JSON document parses into bundles + skipped bundles or an
//! error, never a panic; nothing is lost (each `data` entry is either a bundle or skipped).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(document) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok((bundles, skipped)) = codalab_wm_core::codalab::jsonapi::parse_bundles(&document) {
        let entries = document["data"].as_array().map_or(0, Vec::len);
        assert_eq!(bundles.len() + skipped.len(), entries);
    }
    let _ = codalab_wm_core::codalab::jsonapi::parse_user_name(&document);
});
