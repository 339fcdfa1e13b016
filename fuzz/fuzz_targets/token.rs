//! `/rest/oauth2/token` replies, as the client reads them: any body (deeply nested, huge,
//! not JSON) is accepted or refused with a message, never a panic or a stack overflow; an
//! error body always gives a short message; a body nested deeper than the bound is refused.
#![no_main]

use codalab_wm_core::codalab::limits::check_json_depth;
use codalab_wm_core::codalab::{error_reply_message, parse_token_reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parsed = parse_token_reply(&text);
    if check_json_depth(text.as_bytes()).is_err() {
        assert!(parsed.is_err(), "a reply nested past the bound was accepted");
    }
    let message = error_reply_message(&text);
    assert!(message.chars().count() <= 200, "error message not bounded");
});
