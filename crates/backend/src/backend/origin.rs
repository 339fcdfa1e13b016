//! A deployment's **origin**: which workers' server and CodaLab user a job was started for.
//! The names, labels and filters that find a pool's jobs on its platform have defaults that
//! several deployments share (`manager_id`, pool, Slurm's `<user>-codalab-slurm-worker-`);
//! a backend also marks each job it starts with its origin and leaves out of its listing the
//! jobs marked with another one, so that a staging and a production manager under the same
//! defaults neither count nor stop each other's workers. Jobs marked with no origin (started
//! by an older version, or by upstream's manager) are listed as before.

/// The origin of a deployment whose workers use `server` and log in as `username`: 16 hex
/// digits of the SHA-256 of `server\nusername` (a URL holds no newline), the same after every
/// restart and on every platform (a label value, a Slurm comment). Not a secret and not a
/// security measure: it tells deployments apart.
pub fn origin(server: &str, username: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{server}\n{username}").as_bytes(),
    );
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether a job marked with origin `marked` is listed by a deployment of origin `own`: unless
/// both are known and differ. `own` is `None` when the deployment does not know its user
/// (`down` without credentials): it then lists every origin, as before origins existed.
pub fn is_listed(own: Option<&str>, marked: Option<&str>) -> bool {
    match (own, marked) {
        (Some(own), Some(marked)) => own == marked,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_stable_hex_and_differ_by_server_and_user() {
        let prod = origin("https://worksheets.example.org", "codalab");
        assert_eq!(prod.len(), 16);
        assert!(prod.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(prod, origin("https://worksheets.example.org", "codalab"));
        assert_ne!(prod, origin("https://staging.example.org", "codalab"));
        assert_ne!(prod, origin("https://worksheets.example.org", "alice"));
        // SHA-256 as gce's labels had it before the origin moved here: labels stay the same.
        assert_eq!(prod, "d89d085f9001af0a");
    }

    #[test]
    fn another_origin_is_left_out_and_no_origin_is_listed() {
        assert!(is_listed(Some("aa"), Some("aa")));
        assert!(!is_listed(Some("aa"), Some("bb")));
        assert!(is_listed(Some("aa"), None), "an older or upstream job");
        assert!(
            is_listed(None, Some("bb")),
            "down without the user lists all"
        );
    }
}
