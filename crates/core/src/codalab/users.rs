//! What the root user reads for the dispatch model's quotas ([`crate::dispatch`]): a user's
//! `parallel_run_quota` (`GET /rest/users/<id>`, which shows it to the root user only) and the
//! owners of bundles by uuid (`GET /rest/bundles?keywords=uuid=a,b,…`: the runs on shared
//! workers, whose owners spend their quota there).

use super::{CodaLabClient, first_line, jsonapi, limits, transport::unreachable};
use crate::error::{Error, Result};
use reqwest::Method;
use serde_json::Value;

/// Bundles asked for per search request: 64 uuids keep the request line under the server's
/// limit ([`limits::MAX_REQUEST_LINE_BYTES`]).
const UUIDS_PER_REQUEST: usize = 64;

impl CodaLabClient {
    /// User `id`'s `parallel_run_quota`, or `None` when the reply does not show it (the
    /// manager is not the root user, or the server has no such field).
    pub async fn parallel_run_quota(&self, id: &str) -> Result<Option<i64>> {
        const WHAT: &str = "user quota";
        let access = self.access_token().await?;
        let path = format!("/rest/users/{}", urlencoding_path(id));
        let response = self
            .request(Method::GET, &path)
            .bearer_auth(access.expose())
            .send()
            .await
            .map_err(|e| unreachable(WHAT, e))?;
        let status = response.status();
        let body = limits::read_text(response, limits::MAX_USER_BYTES, WHAT).await?;
        if !status.is_success() {
            return Err(Error::Server {
                what: WHAT,
                status: status.as_u16(),
                message: first_line(&body),
            });
        }
        parse_quota(&body).map_err(|message| Error::InvalidReply {
            from: "codalab server".into(),
            what: WHAT.into(),
            message,
        })
    }

    /// The owner id of each of `uuids` the server returns (a bundle the search does not
    /// return, or returns without an owner, is left out).
    pub async fn owners_of(&self, uuids: &[String]) -> Result<Vec<(String, String)>> {
        let mut owners = Vec::with_capacity(uuids.len());
        for body in self.bundles_by_uuid(uuids, "run owners", false).await? {
            let (bundles, _) = jsonapi::parse_bundles_slice(body.as_bytes())
                .map_err(|message| invalid("run owners", message))?;
            owners.extend(
                bundles
                    .into_iter()
                    .filter_map(|b| Some((b.uuid, b.owner_id?))),
            );
        }
        Ok(owners)
    }

    /// What the server says of each of `uuids` it returns: request, owner, state and times
    /// (the history's runs that left the workers, [`crate::history`]).
    pub async fn runs_of(&self, uuids: &[String]) -> Result<Vec<jsonapi::RunInfo>> {
        let mut runs = Vec::with_capacity(uuids.len());
        for body in self.bundles_by_uuid(uuids, "ended runs", true).await? {
            let document = limits::parse_json(&body).map_err(|m| invalid("ended runs", m))?;
            runs.extend(jsonapi::parse_runs(&document).map_err(|m| invalid("ended runs", m))?);
        }
        Ok(runs)
    }

    /// The bodies of the searches for `uuids` by uuid, [`UUIDS_PER_REQUEST`] a request (with
    /// the owners' names: `include=owner`, which costs the server a users query).
    async fn bundles_by_uuid(
        &self,
        uuids: &[String],
        what: &'static str,
        owner_names: bool,
    ) -> Result<Vec<String>> {
        let mut bodies = Vec::new();
        for chunk in uuids.chunks(UUIDS_PER_REQUEST) {
            let mut query = vec![
                ("keywords", format!("uuid={}", chunk.join(","))),
                ("keywords", format!(".limit={}", chunk.len())),
            ];
            if owner_names {
                query.push(("include", "owner".to_owned()));
            }
            let response = self.search_request(&query).await?;
            let status = response.status();
            let body = limits::read_text(response, limits::MAX_SEARCH_PAGE_BYTES, what).await?;
            if !status.is_success() {
                return Err(Error::Server {
                    what,
                    status: status.as_u16(),
                    message: first_line(&body),
                });
            }
            bodies.push(body);
        }
        Ok(bodies)
    }
}

fn invalid(what: &str, message: String) -> Error {
    Error::InvalidReply {
        from: "codalab server".into(),
        what: what.into(),
        message,
    }
}

/// A user id as one path segment (ids are digits or hex, but the reply is the server's).
fn urlencoding_path(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'-' | b'_' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The `parallel_run_quota` in a `/rest/users/<id>` reply body, if it shows one.
pub fn parse_quota(body: &str) -> std::result::Result<Option<i64>, String> {
    let document: Value = limits::parse_json(body)?;
    match document.pointer("/data/attributes/parallel_run_quota") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("parallel_run_quota is {n}, not an integer")),
        Some(other) => Err(format!("parallel_run_quota is {other}, not an integer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_are_read_from_the_admin_view_of_a_user() {
        // The shape of the 1.7.5 server's AdminUserSchema reply (what root sees).
        let root_view = r#"{"data": {"type": "users", "id": "7", "attributes": {"user_name": "carol", "parallel_run_quota": 1, "time_quota": 31536000}}}"#;
        assert_eq!(parse_quota(root_view), Ok(Some(1)));
        // What a normal user sees of another (UserSchema): no quota.
        let public =
            r#"{"data": {"type": "users", "id": "7", "attributes": {"user_name": "carol"}}}"#;
        assert_eq!(parse_quota(public), Ok(None));
        let odd = r#"{"data": {"attributes": {"parallel_run_quota": "one"}}}"#;
        assert_eq!(
            parse_quota(odd),
            Err("parallel_run_quota is \"one\", not an integer".into())
        );
        assert!(parse_quota("<html>").is_err());
    }

    #[test]
    fn user_ids_are_one_path_segment() {
        assert_eq!(urlencoding_path("0x1f"), "0x1f");
        assert_eq!(urlencoding_path("../a b"), "%2E%2E%2Fa%20b");
    }
}
