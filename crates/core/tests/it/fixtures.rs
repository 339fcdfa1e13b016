//! What many of these tests set up alike: the fake server's user `alice` and a client logged in
//! as her, and a manager config that ticks at once.

use codalab_wm_core::ManagerConfig;
use codalab_wm_core::codalab::CodaLabClient;
use codalab_wm_core::secret::{Credentials, Secret};
use std::time::Duration;

/// `alice`/`alicepw`, a user of the fake CodaLab server (`codalab_wm_fake_codalab`).
pub fn alice() -> Credentials {
    Credentials {
        username: "alice".into(),
        password: Secret::new("alicepw"),
    }
}

/// A client of the server at `url`, as `alice`.
pub fn alice_client(url: &str) -> CodaLabClient {
    CodaLabClient::new(url, alice()).unwrap()
}

/// The default manager config without its sleep between ticks (time moves with
/// `Manager::advance_clock`).
pub fn instant() -> ManagerConfig {
    ManagerConfig {
        sleep_time: Duration::ZERO,
        ..ManagerConfig::default()
    }
}
