//! NodeAddressController over what the kernel really holds: in a fresh network namespace a
//! veth pair gets addresses with `ip`, the Status controllers observe them, and the node
//! address sets follow — loopback and link-local never count, a down link's address leaves
//! `current` but stays in `accumulative`, and the default stays put while it is current.
//! Needs root (CI runs as root); without it the tests fail loudly rather than pass.

use std::process::Command;

use talosbox::controllers::network::{
    AddressStatusController, LinkStatusController, NetworkStatusController, NetworkTarget, NodeAddressController,
};
use talosbox::cosi::{Controller, Harness};
use talosbox::kernel::netns::NetNs;
use talosbox::resources::network::{NAMESPACE, NetworkStatus, NodeAddress};
use talosbox::types::IpPrefix;

fn fresh_ns() -> NetNs {
    assert!(
        rustix::process::geteuid().is_root(),
        "network_node_address tests need root (network namespaces, rtnetlink); run them as root as CI does"
    );
    NetNs::new().expect("creating a network namespace")
}

fn ip(ns: &NetNs, args: &[&str]) {
    let out = ns.run(|| Command::new("ip").args(args).output()).expect("entering the namespace").expect("running ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

fn addresses(h: &Harness, id: &str) -> Vec<String> {
    h.state()
        .find::<NodeAddress>(NAMESPACE, id)
        .unwrap()
        .map(|r| r.spec().addresses.iter().map(IpPrefix::to_string).collect())
        .unwrap_or_default()
}

async fn wait_set(h: &Harness, id: &str, want: &[&str]) {
    let what = format!("{id} == {want:?}");
    h.assert_eventually::<NodeAddress, _>(NAMESPACE, id, &what, |r| {
        r.is_some_and(|r| r.spec().addresses.iter().map(IpPrefix::to_string).eq(want.iter().map(|s| s.to_string())))
    })
    .await;
}

#[tokio::test]
async fn node_addresses_follow_the_kernel() {
    let ns = fresh_ns();
    let target = NetworkTarget::Namespace(ns.clone());
    let controllers: Vec<Box<dyn Controller>> = vec![
        Box::new(AddressStatusController::new(target.clone())),
        Box::new(LinkStatusController::new(target)),
        Box::new(NodeAddressController),
        Box::new(NetworkStatusController),
    ];
    let h = Harness::start(controllers).unwrap();
    ip(&ns, &["link", "set", "lo", "up"]);
    ip(&ns, &["link", "add", "name", "va", "type", "veth", "peer", "name", "vb"]);
    ip(&ns, &["link", "set", "va", "up"]);
    ip(&ns, &["link", "set", "vb", "up"]);
    ip(&ns, &["addr", "add", "10.0.0.9/24", "dev", "va"]);
    ip(&ns, &["addr", "add", "fe80::99/64", "dev", "va"]);
    ip(&ns, &["addr", "add", "192.168.5.2/24", "dev", "vb"]);

    wait_set(&h, NodeAddress::CURRENT_ID, &["10.0.0.9/24", "192.168.5.2/24"]).await;
    wait_set(&h, NodeAddress::DEFAULT_ID, &["10.0.0.9/24"]).await;
    let ready = h
        .assert_eventually::<NetworkStatus, _>(NAMESPACE, NetworkStatus::ID, "address ready", |r| {
            r.is_some_and(|r| r.spec().address_ready)
        })
        .await
        .unwrap();
    assert!(!ready.spec().connectivity_ready, "no default route in the namespace");

    // A lower address on the same link sorts first in current, but the default stays.
    ip(&ns, &["addr", "add", "10.0.0.2/24", "dev", "va"]);
    wait_set(&h, NodeAddress::CURRENT_ID, &["10.0.0.2/24", "10.0.0.9/24", "192.168.5.2/24"]).await;
    assert_eq!(addresses(&h, NodeAddress::DEFAULT_ID), ["10.0.0.9/24"], "the default does not move");

    // vb down (and so va without carrier): their addresses leave current, never accumulative.
    ip(&ns, &["link", "set", "vb", "down"]);
    wait_set(&h, NodeAddress::CURRENT_ID, &[]).await;
    wait_set(&h, NodeAddress::ACCUMULATIVE_ID, &["10.0.0.2/24", "10.0.0.9/24", "192.168.5.2/24"]).await;
    h.stop().await;
}
