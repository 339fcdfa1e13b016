//! `/rest/user` replies, as the identity check reads them: any body gives a user name, none,
//! or an error, never a panic or a stack overflow; the name agrees with serde_json's reading
//! of the same body whenever the body is within the depth bound.
#![no_main]

use codalab_wm_core::codalab::jsonapi::parse_user_name;
use codalab_wm_core::codalab::limits::check_json_depth;
use codalab_wm_core::codalab::parse_user_reply;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parsed = parse_user_reply(&text);
    if check_json_depth(text.as_bytes()).is_err() {
        assert!(parsed.is_err(), "a reply nested past the bound was accepted");
        return;
    }
    if let Ok(document) = serde_json::from_str::<serde_json::Value>(&text) {
        let expected = parse_user_name(&document).map(str::to_owned);
        assert_eq!(parsed, Ok(expected));
    } else {
        assert!(parsed.is_err());
    }
});
