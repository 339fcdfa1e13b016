//! Durations serialized as whole seconds, as the config file gives them and the status
//! document shows them (`serialize_with`), and read back (`deserialize_with`).

use serde::{Deserialize, Deserializer, Serializer};
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

/// An optional number of seconds, as [`serialize_option`] writes it.
pub(crate) fn deserialize_option<'de, D: Deserializer<'de>>(
    from: D,
) -> Result<Option<Duration>, D::Error> {
    Ok(Option::<u64>::deserialize(from)?.map(Duration::from_secs))
}
