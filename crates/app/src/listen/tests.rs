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

/// Review 2026-11-27 §13: who gives way to a new connection. Pure: the gate alone.
#[test]
fn a_new_connection_pushes_out_the_oldest_idle_one_of_the_address_holding_most() {
    let limits = Limits {
        connections: 4,
        per_peer: 3,
        ..Limits::DEFAULT
    };
    let gate = Arc::new(Mutex::new(Gate::default()));
    let flood: IpAddr = "10.0.0.9".parse().unwrap();
    let kubelet: IpAddr = "10.0.0.1".parse().unwrap();
    let mut tickets: Vec<Ticket> = Vec::new();
    let admit = |peer| Gate::admit(&gate, peer, limits);
    // One address holds at most 3: its fourth pushes out its own oldest idle one.
    for _ in 0..4 {
        tickets.push(admit(flood).expect("room"));
    }
    assert!(tickets[0].evicted.try_recv().is_ok(), "the oldest gave way");
    assert!(tickets[1].evicted.try_recv().is_err());
    // Kubelet's probe takes the fourth place; a second probe, with every place taken,
    // pushes out the oldest idle connection of the address holding the most, not a probe.
    let mut probe = admit(kubelet).expect("room for the probe");
    assert!(tickets[1].evicted.try_recv().is_err());
    let mut second = admit(kubelet).expect("room for the second probe");
    assert!(tickets[1].evicted.try_recv().is_ok());
    assert!(probe.evicted.try_recv().is_err());
    // Once every connection is being answered, nothing gives way: the new one is refused.
    probe.serving();
    second.serving();
    for ticket in &mut tickets[2..] {
        ticket.serving();
    }
    assert!(admit(flood).is_none(), "all busy: closed at once");
}

#[test]
fn ipv6_clients_count_by_their_64() {
    let a = peer_key("2001:db8::1".parse().unwrap());
    let b = peer_key("2001:db8::ffff:1".parse().unwrap());
    let c = peer_key("2001:db8:0:1::1".parse().unwrap());
    assert_eq!(a, b);
    assert_ne!(a, c);
    let mapped = peer_key("::ffff:10.0.0.1".parse().unwrap());
    assert_eq!(mapped, "10.0.0.1".parse::<IpAddr>().unwrap());
}
