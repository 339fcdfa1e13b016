//! Which credentials a pool may use, and where it may send them (review §5.6).
//!
//! Whoever may create a CodaLabWorkerPool in a namespace makes the operator read the Secret the
//! pool names and send its username and password to the pool's `server` (the OAuth password
//! grant), and mount it in worker pods. So the operator, not RBAC (which cannot grant `get` on
//! Secrets by label), keeps a pool to what the Secret's owner allowed:
//! - the Secret must opt in with the label [`CREDENTIALS_LABEL`]` = "true"`, so no other Secret
//!   of the namespace (a database password, a token that happens to have the two keys) is ever
//!   used;
//! - when the Secret has the annotation [`SERVERS_ANNOTATION`] (origins, comma-separated), the
//!   pool's server must be one of them;
//! - when the operator runs with `--allowed-servers`, the pool's server must be one of those
//!   (checked before the Secret is read).
//!
//! Origins compare as `scheme://host:port` (lower-case host, default port made explicit), so
//! `https://Worksheets.example.org/` and `https://worksheets.example.org:443` are one server.

use codalab_wm_core::codalab::server_url;
use codalab_wm_core::error::Error;
use k8s_openapi::api::core::v1::Secret;
use std::collections::BTreeSet;

/// The label a Secret carries to be usable as a pool's `credentialsSecret`.
pub const CREDENTIALS_LABEL: &str = "codalab.org/worker-credentials";
/// The annotation of such a Secret that names the servers it may be sent to.
pub const SERVERS_ANNOTATION: &str = "codalab.org/allowed-servers";

/// `scheme://host:port` of `url`, or why it is not a server URL (core's rule for `--server`).
pub fn origin(url: &str) -> Result<String, String> {
    let parsed = server_url("server", url.trim()).map_err(|e| match e {
        Error::InvalidConfig(message) => message,
        other => other.to_string(),
    })?;
    let host = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
    let port = parsed.port_or_known_default().unwrap_or_default();
    Ok(format!("{}://{host}:{port}", parsed.scheme()))
}

/// The servers `--allowed-servers` names (none: any server).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedServers(Option<BTreeSet<String>>);

impl AllowedServers {
    /// From the flag's values (each may hold several, comma-separated).
    pub fn parse(values: &[String]) -> Result<Self, String> {
        let origins = list(values.iter().map(String::as_str))
            .map_err(|e| format!("--allowed-servers: {e}"))?;
        Ok(Self((!origins.is_empty()).then_some(origins)))
    }

    /// `Ok` when pools may use `server`, else why not.
    pub fn check(&self, server: &str) -> Result<(), String> {
        let Some(allowed) = &self.0 else {
            return Ok(());
        };
        let origin = origin(server)?;
        if allowed.contains(&origin) {
            return Ok(());
        }
        let names: Vec<&str> = allowed.iter().map(String::as_str).collect();
        Err(format!(
            "server `{origin}` is not one of the operator's --allowed-servers ({})",
            names.join(", ")
        ))
    }
}

fn list<'a>(values: impl Iterator<Item = &'a str>) -> Result<BTreeSet<String>, String> {
    values
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(origin)
        .collect()
}

/// `Ok` when Secret `secret` (named `name`) lets pools send it to `server`, else why not.
pub fn secret_allows(secret: &Secret, name: &str, server: &str) -> Result<(), String> {
    let labels = secret.metadata.labels.as_ref();
    if labels
        .and_then(|l| l.get(CREDENTIALS_LABEL))
        .map(String::as_str)
        != Some("true")
    {
        return Err(format!(
            "credentials Secret `{name}` is not labelled `{CREDENTIALS_LABEL}=true`: only Secrets \
             their owner labelled so are used by pools"
        ));
    }
    let annotations = secret.metadata.annotations.as_ref();
    let Some(servers) = annotations.and_then(|a| a.get(SERVERS_ANNOTATION)) else {
        return Ok(());
    };
    let allowed = list(std::iter::once(servers.as_str())).map_err(|e| {
        format!("credentials Secret `{name}`: annotation `{SERVERS_ANNOTATION}`: {e}")
    })?;
    let origin = origin(server)?;
    if allowed.contains(&origin) {
        return Ok(());
    }
    Err(format!(
        "credentials Secret `{name}` may not be sent to `{origin}` (its annotation \
         `{SERVERS_ANNOTATION}` says `{servers}`)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_compare_scheme_host_and_port() {
        let cases = [
            (
                "https://Worksheets.example.org/",
                Ok("https://worksheets.example.org:443"),
            ),
            ("http://127.0.0.1:2900/rest", Ok("http://127.0.0.1:2900")),
            ("http://127.0.0.1", Ok("http://127.0.0.1:80")),
            (
                "ftp://127.0.0.1",
                Err("must look like http[s]://<host>[:<port>]"),
            ),
            ("worksheets", Err("is not a URL")),
        ];
        for (url, expected) in cases {
            match (origin(url), expected) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{url}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{url}: {got}"),
                (got, want) => panic!("{url}: {got:?}, expected {want:?}"),
            }
        }
    }

    #[test]
    fn the_operator_flag_limits_the_servers() {
        let any = AllowedServers::parse(&[]).unwrap();
        assert_eq!(any.check("https://anywhere.example"), Ok(()));
        let values = ["https://a.example, http://127.0.0.1:2900".to_owned()];
        let some = AllowedServers::parse(&values).unwrap();
        assert_eq!(some.check("https://A.example/"), Ok(()));
        assert_eq!(some.check("http://127.0.0.1:2900"), Ok(()));
        let refused = some.check("https://evil.example").unwrap_err();
        assert!(
            refused.contains(
                "`https://evil.example:443` is not one of the operator's --allowed-servers"
            ),
            "{refused}"
        );
        let bad = AllowedServers::parse(&["a.example".to_owned()]).unwrap_err();
        assert!(
            bad.starts_with("--allowed-servers: server `a.example` is not a URL"),
            "{bad}"
        );
    }

    fn secret(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Secret {
        let mut secret = Secret::default();
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        secret.metadata.labels = Some(map(labels));
        secret.metadata.annotations = Some(map(annotations));
        secret
    }

    #[test]
    fn only_secrets_that_opt_in_are_used_and_only_for_their_servers() {
        let server = "https://a.example";
        let opted = [(CREDENTIALS_LABEL, "true")];
        assert_eq!(secret_allows(&secret(&opted, &[]), "c", server), Ok(()));
        for labels in [
            &[][..],
            &[(CREDENTIALS_LABEL, "false")][..],
            &[("app", "db")][..],
        ] {
            let refused = secret_allows(&secret(labels, &[]), "db-password", server).unwrap_err();
            assert!(
                refused.contains(
                    "Secret `db-password` is not labelled `codalab.org/worker-credentials=true`"
                ),
                "{refused}"
            );
        }
        let pinned = [(
            SERVERS_ANNOTATION,
            "https://a.example, https://b.example:8443",
        )];
        assert_eq!(secret_allows(&secret(&opted, &pinned), "c", server), Ok(()));
        let refused =
            secret_allows(&secret(&opted, &pinned), "c", "https://evil.example").unwrap_err();
        assert!(
            refused.contains("Secret `c` may not be sent to `https://evil.example:443`"),
            "{refused}"
        );
        let broken = [(SERVERS_ANNOTATION, "a.example")];
        let refused = secret_allows(&secret(&opted, &broken), "c", server).unwrap_err();
        assert!(
            refused.contains("annotation `codalab.org/allowed-servers`"),
            "{refused}"
        );
    }
}
