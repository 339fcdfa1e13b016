//! `/rest/bundles` replies: any body parses into bundles + skipped bundles or an error, never a
//! panic; nothing is lost (each `data` entry is either a bundle or skipped); and the fast path
//! the client uses (`parse_bundles_slice`: a typed model read with sonic-rs, falling back to
//! `serde_json::Value`) gives exactly what the `Value` path gives, errors included.
#![no_main]

use codalab_wm_core::codalab::jsonapi::{parse_bundles, parse_bundles_slice, parse_user_name};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fast = parse_bundles_slice(data);
    let Ok(document) = serde_json::from_slice::<serde_json::Value>(data) else {
        assert!(fast.is_err(), "the fast path accepted a body serde_json rejects");
        return;
    };
    let slow = parse_bundles(&document);
    if let Ok((bundles, skipped)) = &slow {
        let entries = document["data"].as_array().map_or(0, Vec::len);
        assert_eq!(bundles.len() + skipped.len(), entries);
    }
    assert_eq!(fast, slow, "the two parse paths disagree");
    let _ = parse_user_name(&document);
});
