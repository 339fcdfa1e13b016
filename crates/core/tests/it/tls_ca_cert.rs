//! `--ca-cert` against a TLS server on 127.0.0.1 with certificates made by the `openssl` CLI
//! in the test (issue 22): OpenSSL's default self-signed certificate (CA:TRUE, no
//! subjectAltName) is accepted when given; a certificate that is not trusted is a fatal error
//! that names `--ca-cert`, not a temporary "unreachable"; a file without a certificate is
//! refused when the client is built.

use crate::hostile::{Hostile, well_behaved};
use codalab_wm_core::codalab::{ClientOptions, CodaLabClient, tls};
use codalab_wm_core::secret::{Credentials, Secret};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// OpenSSL's default self-signed certificate: `req -x509` with the default configuration.
fn default_self_signed(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in", "cert.pem"])
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("CA:TRUE"), "not the case under test: {text}");
    (
        std::fs::read(dir.join("cert.pem")).unwrap(),
        std::fs::read(dir.join("key.pem")).unwrap(),
    )
}

async fn tls_server(cert: &[u8], key: &[u8]) -> Hostile {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    Hostile::start_with(well_behaved, Some(acceptor)).await
}

fn client(server: &Hostile, ca: Option<&[u8]>) -> CodaLabClient {
    let credentials = Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    };
    let options = ClientOptions {
        ca_certificates: ca.map(|pem| vec![pem.to_vec()]).unwrap_or_default(),
        ..ClientOptions::default()
    };
    let url = format!("https://127.0.0.1:{}", server.addr.port());
    CodaLabClient::with_options(&url, credentials, &options).unwrap()
}

#[tokio::test]
async fn openssl_default_self_signed_certificate_is_accepted_with_ca_cert() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = default_self_signed(dir.path());
    let server = tls_server(&cert, &key).await;
    client(&server, Some(&cert)).login().await.unwrap();
    assert_eq!(server.requests().len(), 2, "token and user over TLS");
}

#[tokio::test]
async fn an_untrusted_certificate_is_fatal_and_names_ca_cert() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = default_self_signed(dir.path());
    let server = tls_server(&cert, &key).await;
    let other = tempfile::tempdir().unwrap();
    let (other_cert, _) = default_self_signed(other.path());
    for ca in [None, Some(other_cert.as_slice())] {
        let error = client(&server, ca).login().await.unwrap_err();
        let text = error.to_string();
        assert!(error.is_fatal(), "{text}");
        assert!(!error.is_temporary(), "{text}");
        assert!(text.contains("--ca-cert"), "{text}");
        assert!(text.contains("certificate"), "{text}");
    }
    assert!(server.requests().is_empty());
}

#[test]
fn a_file_without_a_certificate_is_refused() {
    for garbage in [
        &b"not a certificate at all\n"[..],
        b"",
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ] {
        let error = tls::parse_ca_certificates(garbage).unwrap_err();
        assert!(error.contains("certificate"), "{error}");
        let options = ClientOptions {
            ca_certificates: vec![garbage.to_vec()],
            ..ClientOptions::default()
        };
        let credentials = Credentials {
            username: "alice".into(),
            password: Secret::new("alicepw"),
        };
        let error =
            CodaLabClient::with_options("https://127.0.0.1:1", credentials, &options).unwrap_err();
        assert!(error.to_string().contains("--ca-cert"), "{error}");
    }
}
