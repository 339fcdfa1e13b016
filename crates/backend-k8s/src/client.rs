//! The kube client: from `cluster_host` with its token and CA certificate, or inferred from
//! the kubeconfig / in-cluster service account when no host is given.

use crate::config::{CertSource, KubernetesConfig};
use codalab_wm_backend::error::{Error, Result};
use std::time::Duration;

/// The longest wait for a TCP/TLS connection, whatever the request timeout.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A kube client for `config`. kube's own retrying is turned off: core retries temporary
/// errors, once, with backoff.
pub(crate) async fn connect(config: &KubernetesConfig) -> Result<kube::Client> {
    kube::Client::try_from(client_config(config).await?).map_err(|e| {
        Error::InvalidConfig(format!(
            "kubernetes: cannot build a client for the cluster: {e}"
        ))
    })
}

/// The kube configuration for `config`, timeouts and retry policy included.
async fn client_config(config: &KubernetesConfig) -> Result<kube::Config> {
    let mut kube_config = match &config.cluster_host {
        Some(host) => explicit_config(config, host)?,
        None => kube::Config::infer().await.map_err(|e| {
            Error::InvalidConfig(format!(
                "kubernetes: no cluster_host given and no kubeconfig or in-cluster configuration found: {e}"
            ))
        })?,
    };
    let timeout = Duration::from_secs(config.request_timeout_seconds);
    kube_config.default_namespace = config.namespace.clone();
    kube_config.default_retry = false;
    kube_config.connect_timeout = Some(timeout.min(MAX_CONNECT_TIMEOUT));
    kube_config.read_timeout = Some(timeout);
    kube_config.write_timeout = Some(timeout);
    Ok(kube_config)
}

/// The configuration for an explicit API server URL, token and CA certificate.
fn explicit_config(config: &KubernetesConfig, host: &str) -> Result<kube::Config> {
    let url = host.parse().map_err(|e| {
        Error::InvalidConfig(format!(
            "kubernetes: cluster_host `{host}` is not a valid URL: {e}"
        ))
    })?;
    let mut kube_config = kube::Config::new(url);
    if let Some(token) = config.auth_token.as_ref().filter(|t| !t.is_empty()) {
        kube_config.auth_info.token = Some(secrecy::SecretString::from(token.expose().to_owned()));
    }
    match config.cert_source() {
        CertSource::None => {}
        CertSource::Path(path) => {
            let pem = std::fs::read(&path).map_err(|e| {
                Error::InvalidConfig(format!(
                    "kubernetes: cannot read the CA certificate cert_path `{path}`: {e}"
                ))
            })?;
            kube_config.root_cert = Some(certificates(&pem, &format!("cert_path `{path}`"))?);
        }
        CertSource::Contents(pem) => {
            kube_config.root_cert = Some(certificates(pem.as_bytes(), "cert")?);
        }
    }
    Ok(kube_config)
}

/// The DER certificates in PEM text `pem`, which must hold at least one.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<Vec<u8>>> {
    let blocks = pem::parse_many(pem).map_err(|e| {
        Error::InvalidConfig(format!("kubernetes: {what} is not a PEM certificate: {e}"))
    })?;
    let certs: Vec<Vec<u8>> = blocks
        .into_iter()
        .filter(|b| b.tag() == "CERTIFICATE")
        .map(|b| b.into_contents())
        .collect();
    if certs.is_empty() {
        return Err(Error::InvalidConfig(format!(
            "kubernetes: {what} holds no PEM certificate"
        )));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any base64 body makes a PEM block; the client only checks the certificate at connect.
    const PEM: &str = "-----BEGIN CERTIFICATE-----\nTUlJQg==\n-----END CERTIFICATE-----\n";

    #[test]
    fn certificates_come_from_pem_blocks() {
        assert_eq!(
            certificates(PEM.as_bytes(), "cert").unwrap(),
            vec![b"MIIB".to_vec()]
        );
        let err = certificates(b"not a cert", "cert").unwrap_err().to_string();
        assert!(err.contains("cert holds no PEM certificate"), "{err}");
    }

    #[test]
    fn an_explicit_host_takes_token_and_cert() {
        let config = KubernetesConfig {
            cluster_host: Some("https://k8s.example:6443".into()),
            auth_token: Some(codalab_wm_backend::secret::Secret::new("tok")),
            cert: Some(PEM.replace('\n', r"\n")),
            ..KubernetesConfig::default()
        };
        let kube_config = explicit_config(&config, "https://k8s.example:6443").unwrap();
        assert_eq!(
            kube_config.cluster_url.to_string(),
            "https://k8s.example:6443/"
        );
        assert!(kube_config.auth_info.token.is_some());
        assert_eq!(kube_config.root_cert.unwrap().len(), 1);
    }

    #[test]
    fn a_missing_cert_file_is_a_config_error() {
        let config = KubernetesConfig {
            cert_path: Some("/nonexistent/ca.pem".into()),
            ..KubernetesConfig::default()
        };
        let err = explicit_config(&config, "https://h").unwrap_err();
        assert!(err.is_fatal());
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }

    #[tokio::test]
    async fn kube_retries_are_off_and_timeouts_set() {
        let config = KubernetesConfig {
            cluster_host: Some("http://127.0.0.1:9".into()),
            request_timeout_seconds: 3,
            ..KubernetesConfig::default()
        };
        let kube_config = client_config(&config).await.unwrap();
        assert!(!kube_config.default_retry);
        assert_eq!(kube_config.read_timeout, Some(Duration::from_secs(3)));
        assert_eq!(kube_config.connect_timeout, Some(Duration::from_secs(3)));
        assert_eq!(kube_config.default_namespace, "default");
        connect(&config).await.unwrap();
    }
}
