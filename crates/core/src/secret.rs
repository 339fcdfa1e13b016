//! Secret strings that never print.

use std::fmt;

/// A secret value (password, token, key). `Debug` and `Display` print `***`; read the value
/// with [`Secret::expose`] only where it is sent to the platform that needs it.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value itself.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

/// CodaLab credentials that workers use to log in (`CODALAB_USERNAME`/`CODALAB_PASSWORD`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// The CodaLab user name.
    pub username: String,
    /// The CodaLab password.
    pub password: Secret,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_value() {
        let creds = Credentials {
            username: "alice".into(),
            password: Secret::new("hunter2"),
        };
        let shown = format!("{creds:?} {}", creds.password);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert_eq!(creds.password.expose(), "hunter2");
    }
}
