//! Durations serialized as whole seconds, as the config file gives them (`serialize_with`).

use serde::Serializer;
use std::time::Duration;

/// A duration in whole seconds.
pub(crate) fn serialize<S: Serializer>(value: &Duration, to: S) -> Result<S::Ok, S::Error> {
    to.serialize_u64(value.as_secs())
}

/// An optional duration in whole seconds (unset: `null`).
pub(crate) fn serialize_option<S: Serializer>(
    value: &Option<Duration>,
    to: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serialize(value, to),
        None => to.serialize_none(),
    }
}
