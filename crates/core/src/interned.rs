//! The codes the manager writes as `&'static str` (a reason's rule, an event's switch, a
//! counter's metric …), read back from a status document: each distinct code is kept once for
//! the process, so that a [`Status`](crate::status::Status) reads from any document without
//! borrowing it. The table is bounded: a document with more distinct codes than the manager
//! has is refused, not kept.

use serde::{Deserialize, Deserializer, de::Error as _};
use std::collections::BTreeSet;
use std::sync::Mutex;

/// A code the manager writes (`&'static str`). The alias is what serde reads through
/// [`deserialize`]: a field of type `&'static str` itself would be borrowed from the document.
pub type Code = &'static str;

/// Distinct codes kept at most (the manager writes a few dozen).
const MAX_CODES: usize = 1024;

/// Every code read so far.
static CODES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

/// A code read back (`deserialize_with`).
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Code, D::Error> {
    let code = String::deserialize(from)?;
    intern(code).ok_or_else(|| D::Error::custom("more distinct codes than any manager writes"))
}

/// The one copy of `code`, kept from now on; `None` when the table is full.
fn intern(code: String) -> Option<&'static str> {
    let mut codes = CODES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(known) = codes.get(code.as_str()) {
        return Some(known);
    }
    if codes.len() >= MAX_CODES {
        return None;
    }
    let code: &'static str = Box::leak(code.into_boxed_str());
    codes.insert(code);
    Some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_is_kept_once_and_the_table_is_bounded() {
        let first = intern("launch_failed".to_owned()).unwrap();
        let again = intern("launch_failed".to_owned()).unwrap();
        assert!(std::ptr::eq(first, again));
        let kept = (0..2 * MAX_CODES)
            .filter_map(|n| intern(format!("code-{n}")))
            .count();
        assert!(kept < MAX_CODES, "{kept}");
        assert_eq!(intern("launch_failed".to_owned()), Some(first));
    }
}
