//! The `Host` rule, pure: every kind of name against every kind of server.

use super::*;

#[test]
fn loopback_servers_answer_addresses_localhost_and_listed_names() {
    let loopback = HostRule::new("127.0.0.1".parse().unwrap(), &[]);
    let listed = HostRule::new("127.0.0.1".parse().unwrap(), &["WM.example.org".into()]);
    let wildcard = HostRule::new("0.0.0.0".parse().unwrap(), &[]);
    let wildcard_listed = HostRule::new("0.0.0.0".parse().unwrap(), &["wm".into()]);
    let cases = [
        (Some("127.0.0.1:9464"), [true, true, true, true]),
        (Some("127.0.0.1"), [true, true, true, true]),
        (Some("10.1.2.3:9464"), [true, true, true, true]),
        (Some("[::1]:9464"), [true, true, true, true]),
        (Some("[::1]"), [true, true, true, true]),
        (Some("localhost:9999"), [true, true, true, true]),
        (Some("LOCALHOST."), [true, true, true, true]),
        (None, [true, true, true, true]),
        (
            Some("rebind.attacker.example:9464"),
            [false, false, true, false],
        ),
        (
            Some("localhost.attacker.example"),
            [false, false, true, false],
        ),
        (Some("127.0.0.1.nip.io:9464"), [false, false, true, false]),
        (Some("wm.example.org:9464"), [false, true, true, false]),
        (Some("wm.example.org."), [false, true, true, false]),
        (Some("wm:9464"), [false, false, true, true]),
        (Some("[::1"), [false, false, true, false]),
        (Some(""), [false, false, true, false]),
    ];
    let rules = [&loopback, &listed, &wildcard, &wildcard_listed];
    for (host, want) in cases {
        for (rule, want) in rules.iter().zip(want) {
            assert_eq!(rule.allows(host), want, "{host:?} with {rule:?}");
        }
    }
}
