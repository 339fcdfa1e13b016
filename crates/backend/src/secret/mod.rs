//! Secret strings that never print, and where the manager's own come from.

pub mod files;

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

impl Credentials {
    /// Credentials from a password file (user name on line 1, password on line 2; refused
    /// when group or others may read it), else from the secrets directory's
    /// `codalab-username` and `codalab-password` ([`files`]), else from
    /// `CODALAB_USERNAME`/`CODALAB_PASSWORD`.
    pub fn load(password_file: Option<&std::path::Path>) -> crate::Result<Self> {
        let invalid = |message: String| crate::Error::InvalidConfig(message);
        if password_file.is_none()
            && let Some((username, password)) = files::credentials()?
        {
            return Ok(Self { username, password });
        }
        let Some(path) = password_file else {
            let username = std::env::var("CODALAB_USERNAME").unwrap_or_default();
            let password = std::env::var("CODALAB_PASSWORD").unwrap_or_default();
            if username.is_empty() || password.is_empty() {
                return Err(invalid("no CodaLab credentials: set CODALAB_USERNAME and CODALAB_PASSWORD, pass --password-file, or give codalab-username and codalab-password files in CODALAB_WM_SECRETS_DIR".into()));
            }
            return Ok(Self {
                username,
                password: Secret::new(password),
            });
        };
        let shown = path.display();
        let text =
            read_private(path).map_err(|why| invalid(format!("password file {shown}{why}")))?;
        let mut lines = text.lines();
        let username = lines.next().unwrap_or_default().trim().to_owned();
        let password = lines.next().unwrap_or_default().trim().to_owned();
        if username.is_empty() || password.is_empty() {
            return Err(invalid(format!(
                "password file {shown} must hold the user name on line 1 and the password on line 2"
            )));
        }
        Ok(Self {
            username,
            password: Secret::new(password),
        })
    }
}

/// The text of a regular file that only its owner may read; the error completes "password
/// file PATH".
fn read_private(path: &std::path::Path) -> Result<String, String> {
    read_guarded(
        path,
        0o077,
        ": give a file holding the user name on line 1 and the password on line 2",
    )
}

/// The text of regular file `path` (symbolic links followed), refused when one of the mode
/// bits `forbidden` is set (`0o077`: group or others may read it; `0o007`: others may); the
/// error completes "… file PATH", and `not_regular` completes its "is not a regular file".
pub(crate) fn read_guarded(
    path: &std::path::Path,
    forbidden: u32,
    not_regular: &str,
) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let metadata = std::fs::metadata(path).map_err(|e| format!(" cannot be read: {e}"))?;
    if !metadata.is_file() {
        return Err(format!(" is not a regular file{not_regular}"));
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & forbidden != 0 {
        let (who, fix) = match forbidden & 0o070 {
            0 => ("others", "o-rwx"),
            _ => ("group or others", "600"),
        };
        return Err(format!(
            " is accessible by {who} (mode {mode:03o}): run `chmod {fix} {}`",
            path.display()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!(" cannot be read: {e}"))
}

/// `url` with the password of its userinfo (`http://user:pw@host`) replaced by `***`, for
/// logs and error messages; `url` itself when it has none (or is not a URL).
pub fn redact_url(url: &str) -> std::borrow::Cow<'_, str> {
    match url::Url::parse(url) {
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
