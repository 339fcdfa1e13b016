//! Shared Key request signing, exactly as the Batch service checks it.
//!
//! The string to sign is the verb, eleven standard headers (Content-Length signed as sent,
//! empty for a GET; Date empty because `ocp-date` is sent instead), every `ocp-*` header
//! lowercased and sorted, then `/<account><raw path>` and each query parameter, percent-decoded
//! and sorted by name. The signature is the base64 HMAC-SHA256 of that string under the
//! base64-decoded account key. The same code signs requests (the client) and checks them (the
//! fake service, `codalab-wm-fake-azure`), and the unit tests reproduce vectors made with the
//! official SDK's signer.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use codalab_wm_backend::Error;
use codalab_wm_backend::secret::Secret;
use hmac::{Hmac, Mac};
use reqwest::header::HeaderMap;
use sha2::Sha256;
use std::fmt;

/// The standard headers in the order they appear in the string to sign.
const SIGNED_HEADERS: [&str; 11] = [
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
];

/// A Batch account name and its decoded key. `Debug` never shows the key.
#[derive(Clone)]
pub struct SharedKeyCredential {
    account: String,
    key: Vec<u8>,
}

impl fmt::Debug for SharedKeyCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedKeyCredential")
            .field("account", &self.account)
            .field("key", &"***")
            .finish()
    }
}

impl SharedKeyCredential {
    /// A credential from the account name and the base64 account key the portal shows.
    pub fn new(account: impl Into<String>, key_base64: &Secret) -> Result<Self, Error> {
        let account = account.into();
        if account.is_empty() {
            return Err(Error::InvalidConfig(
                "azure_batch: account_name is empty".into(),
            ));
        }
        let key = BASE64.decode(key_base64.expose().trim()).map_err(|_| {
            Error::InvalidConfig(format!(
                "azure_batch: the account key of `{account}` is not valid base64"
            ))
        })?;
        if key.is_empty() {
            return Err(Error::InvalidConfig(format!(
                "azure_batch: the account key of `{account}` is empty"
            )));
        }
        Ok(Self { account, key })
    }

    /// The account name.
    pub fn account(&self) -> &str {
        &self.account
    }

    /// The string to sign for a request. `path` is the raw (still percent-encoded) URL path,
    /// `query` the raw query string without `?`.
    pub fn string_to_sign(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> String {
        let mut out = String::with_capacity(256);
        out.push_str(&method.to_ascii_uppercase());
        out.push('\n');
        for name in SIGNED_HEADERS {
            out.push_str(header_value(headers, name));
            out.push('\n');
        }
        out.push_str(&canonicalized_headers(headers));
        out.push('/');
        out.push_str(&self.account);
        out.push_str(path);
        for (name, value) in canonicalized_query(query.unwrap_or("")) {
            out.push('\n');
            out.push_str(&name);
            out.push(':');
            out.push_str(&value);
        }
        out
    }

    /// The base64 HMAC-SHA256 of `string_to_sign` under the account key.
    pub fn signature(&self, string_to_sign: &str) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC accepts keys of any length");
        mac.update(string_to_sign.as_bytes());
        BASE64.encode(mac.finalize().into_bytes())
    }

    /// The `Authorization` header value for a request: `SharedKey <account>:<signature>`.
    pub fn authorization(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> String {
        let signature = self.signature(&self.string_to_sign(method, path, query, headers));
        format!("SharedKey {}:{signature}", self.account)
    }

    /// Whether `authorization` is the right header for this request (used by the fake service,
    /// `codalab-wm-fake-azure`). Compares in constant time.
    pub fn verify(
        &self,
        authorization: &str,
        method: &str,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> bool {
        let expected = self.authorization(method, path, query, headers);
        let (a, b) = (expected.as_bytes(), authorization.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// The value of header `name`, or "" when absent or not text.
fn header_value<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Every header whose name contains `ocp-` and whose value is not empty, as
/// `name:value\n` with the name lowercased, sorted by name then value.
fn canonicalized_headers(headers: &HeaderMap) -> String {
    let mut pairs: Vec<(String, &str)> = headers
        .iter()
        .filter(|(name, _)| name.as_str().to_ascii_lowercase().contains("ocp-"))
        .filter_map(|(name, value)| {
            Some((name.as_str().to_ascii_lowercase(), value.to_str().ok()?))
        })
        .filter(|(_, value)| !value.is_empty())
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(name, value)| format!("{name}:{value}\n"))
        .collect()
}

/// The query parameters percent-decoded, first value of each name, empty values dropped,
/// sorted by name (Python's `parse_qs` as the SDK uses it).
fn canonicalized_query(query: &str) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        if value.is_empty() || pairs.iter().any(|(n, _)| *n == name) {
            continue;
        }
        pairs.push((name.into_owned(), value.into_owned()));
    }
    pairs.sort();
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    const VECTORS: &str = include_str!("../tests/data/sharedkey-vectors.json");

    fn headers_of(vector: &serde_json::Value) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in vector["headers"].as_object().expect("headers object") {
            let name = HeaderName::from_bytes(name.as_bytes()).expect("header name");
            headers.insert(
                name,
                HeaderValue::from_str(value.as_str().expect("text")).expect("value"),
            );
        }
        headers
    }

    /// Every vector made with the official SDK's signer: the same string to sign and header.
    #[test]
    fn reproduces_every_sdk_vector() {
        let file: serde_json::Value = serde_json::from_str(VECTORS).expect("vectors parse");
        let vectors = file["vectors"].as_array().expect("vectors array");
        assert_eq!(vectors.len(), 5);
        for vector in vectors {
            let name = vector["name"].as_str().unwrap_or_default();
            let key = Secret::new(vector["key_base64"].as_str().expect("key"));
            let credential =
                SharedKeyCredential::new(vector["account"].as_str().expect("account"), &key)
                    .unwrap();
            let url =
                reqwest::Url::parse(vector["url"].as_str().expect("url")).expect("url parses");
            let method = vector["method"].as_str().expect("method");
            let headers = headers_of(vector);
            let string_to_sign =
                credential.string_to_sign(method, url.path(), url.query(), &headers);
            assert_eq!(
                string_to_sign,
                vector["string_to_sign"].as_str().unwrap(),
                "{name}"
            );
            let authorization = credential.authorization(method, url.path(), url.query(), &headers);
            assert_eq!(
                authorization,
                vector["authorization"].as_str().unwrap(),
                "{name}"
            );
            assert!(
                credential.verify(&authorization, method, url.path(), url.query(), &headers),
                "{name}"
            );
        }
    }

    #[test]
    fn a_changed_request_does_not_verify() {
        let credential = SharedKeyCredential::new("acct", &Secret::new("a2V5")).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("content-length", HeaderValue::from_static("0"));
        let good = credential.authorization(
            "POST",
            "/jobs/j/tasks/t/terminate",
            Some("api-version=1"),
            &headers,
        );
        assert!(credential.verify(
            &good,
            "POST",
            "/jobs/j/tasks/t/terminate",
            Some("api-version=1"),
            &headers
        ));
        assert!(!credential.verify(
            &good,
            "POST",
            "/jobs/j/tasks/u/terminate",
            Some("api-version=1"),
            &headers
        ));
        assert!(!credential.verify(
            &good,
            "POST",
            "/jobs/j/tasks/t/terminate",
            Some("api-version=2"),
            &headers
        ));
        headers.insert("content-length", HeaderValue::from_static("1"));
        assert!(!credential.verify(
            &good,
            "POST",
            "/jobs/j/tasks/t/terminate",
            Some("api-version=1"),
            &headers
        ));
    }

    #[test]
    fn query_is_decoded_sorted_first_value_and_blank_dropped() {
        let pairs = canonicalized_query("b=2&a=%27x%20y%27&b=3&c=&%24filter=id+eq+1");
        let expected = [("$filter", "id eq 1"), ("a", "'x y'"), ("b", "2")];
        let got: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn ocp_headers_are_lowercased_sorted_and_non_empty() {
        let mut headers = HeaderMap::new();
        headers.insert("ocp-date", HeaderValue::from_static("D"));
        headers.insert("x-ocp-extra", HeaderValue::from_static("E"));
        headers.insert("ocp-empty", HeaderValue::from_static(""));
        headers.insert("client-request-id", HeaderValue::from_static("id"));
        assert_eq!(
            canonicalized_headers(&headers),
            "ocp-date:D\nx-ocp-extra:E\n"
        );
    }

    #[test]
    fn bad_keys_are_configuration_errors_without_the_key() {
        let err = SharedKeyCredential::new("acct", &Secret::new("not base64!")).unwrap_err();
        assert!(err.is_fatal());
        assert!(!err.to_string().contains("not base64!"), "{err}");
        let credential = SharedKeyCredential::new("acct", &Secret::new("c2VjcmV0")).unwrap();
        assert!(!format!("{credential:?}").contains("c2VjcmV0"));
    }
}
