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

/// `url` with the password of its userinfo (`http://user:pw@host`) replaced by `***`, for
/// logs and error messages; `url` itself when it has none (or is not a URL).
pub fn redact_url(url: &str) -> std::borrow::Cow<'_, str> {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            let mut text = parsed.to_string();
            // `Url` adds a `/` path to `http://host`; keep the URL as it was written.
            if !url.ends_with('/') && parsed.path() == "/" && parsed.query().is_none() {
                text.pop();
            }
            text.into()
        }
        _ => url.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_passwords_are_redacted() {
        assert_eq!(redact_url("http://u:hunter2@h:2900"), "http://u:***@h:2900");
        assert_eq!(redact_url("https://u:p@h/x/"), "https://u:***@h/x/");
        assert_eq!(redact_url("http://h:2900"), "http://h:2900");
        assert_eq!(redact_url("not a url"), "not a url");
    }

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
