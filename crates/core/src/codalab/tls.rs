//! `--ca-cert`: the certificates trusted for the CodaLab server, on top of the public roots;
//! and the classing of certificate failures as fatal configuration errors.
//!
//! A certificate given with `--ca-cert` is trusted in two ways: as a root (a private CA that
//! signed the server's certificate), and pinned (the server presents exactly this
//! certificate). Pinning is what makes OpenSSL's default self-signed certificate work
//! (`openssl req -x509 …`): it says `CA:TRUE` and usually has no subjectAltName, so the
//! WebPKI rules refuse it as a server's own certificate (`CaUsedAsEndEntity`, or a name
//! mismatch); the administrator named that exact certificate, so it is accepted as the
//! server's identity, whatever names and extensions it carries. The TLS handshake still
//! proves that the server holds its private key.

use crate::error::Error;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;

/// The certificates of a `--ca-cert` PEM file; an error when there is none or one is not an
/// X.509 certificate (the caller names the file).
pub fn parse_ca_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM file: {e}"))?;
    if certificates.is_empty() {
        return Err(
            "no certificate in it (expected PEM blocks `-----BEGIN CERTIFICATE-----`)".into(),
        );
    }
    let mut roots = RootCertStore::empty();
    for (index, certificate) in certificates.iter().enumerate() {
        roots.add(certificate.clone()).map_err(|e| {
            format!(
                "certificate {} is not a usable X.509 certificate: {e}",
                index + 1
            )
        })?;
    }
    Ok(certificates)
}

/// The TLS configuration with the public roots plus the `--ca-cert` certificates (`pems`).
pub(crate) fn client_config(pems: &[Vec<u8>]) -> Result<rustls::ClientConfig, String> {
    let mut pinned = Vec::new();
    for pem in pems {
        pinned.extend(parse_ca_certificates(pem)?);
    }
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for certificate in &pinned {
        roots.add(certificate.clone()).map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| e.to_string())?;
    let verifier = Arc::new(PinnedOrWebPki { webpki, pinned });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(config)
}

/// Accepts a server certificate that is byte for byte one of the `--ca-cert` certificates;
/// verifies any other by the WebPKI rules against the roots.
#[derive(Debug)]
struct PinnedOrWebPki {
    webpki: Arc<WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for PinnedOrWebPki {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self
            .pinned
            .iter()
            .any(|p| p.as_ref() == end_entity.as_ref())
        {
            return Ok(ServerCertVerified::assertion());
        }
        self.webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// A refused server certificate, as a refusal that says what to do (fatal at start, see
/// [`Refused`](super::limits::Refused)); `None` for any other transport error.
pub(crate) fn classify(what: &'static str, error: &reqwest::Error) -> Option<Error> {
    let tls = super::find_cause::<rustls::Error>(error)?;
    let certificate = matches!(
        tls,
        rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::UnsupportedNameType
    );
    certificate.then(|| {
        super::limits::Refused(format!(
            "the CodaLab server's TLS certificate was refused during {what}: {tls}; if the server \
             uses a private CA or a self-signed certificate, give that certificate (PEM) with \
             --ca-cert"
        ))
        .into_error(
            what,
            error.url().map_or_else(String::new, super::limits::origin),
        )
    })
}
