//! The network config controllers and the merge together, on the in-memory state: no kernel,
//! no privileges. A node's links go in as `LinkStatus` resources and its configuration as
//! the `MachineConfig` resource; the tests watch the layered candidates in `network-config`
//! and the merged winners in `network`.

use talosbox::controllers::config::machine_config::parse;
use talosbox::controllers::network::{
    AddressConfigController, LinkConfigController, OperatorConfigController, merge_controllers,
};
use talosbox::cosi::{Controller, Harness};
use talosbox::resources::config::{self as cfg, MachineConfig};
use talosbox::resources::network::{
    AddressSpec, CONFIG_NAMESPACE, ConfigLayer, HardwareAddress, LinkFlags, LinkSpec, LinkStatus, LinkType, NAMESPACE,
    OperatorSpec,
};

fn harness() -> Harness {
    let mut controllers: Vec<Box<dyn Controller>> = vec![
        Box::new(AddressConfigController::new()),
        Box::new(LinkConfigController::new()),
        Box::new(OperatorConfigController::new()),
    ];
    controllers.extend(merge_controllers());
    let registry = std::sync::Arc::new(talosbox::resources::registry().unwrap());
    Harness::start_with(talosbox::cosi::State::in_memory(), registry, controllers).unwrap()
}

fn seed_links(h: &Harness) {
    let lo = LinkStatus { link_type: LinkType::LOOPBACK, flags: LinkFlags::LOOPBACK, ..LinkStatus::default() };
    h.seed(NAMESPACE, "lo", lo).unwrap();
    let eth0 = LinkStatus {
        link_type: LinkType::ETHER,
        hardware_addr: "52:54:00:12:34:56".parse::<HardwareAddress>().unwrap(),
        ..LinkStatus::default()
    };
    h.seed(NAMESPACE, "eth0", eth0).unwrap();
}

const STATIC_ETH0: &str = "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    interfaces:\n\
                           \x20     - interface: eth0\n        addresses: [192.168.1.2/24]\n        dhcp: false\n";

#[tokio::test]
async fn a_static_address_beats_default_dhcp_and_removing_it_brings_dhcp_back() {
    let h = harness();
    seed_links(&h);

    // A fresh node: loopback, eth0 up, and a default DHCPv4 operator on eth0.
    h.assert_eventually::<OperatorSpec, _>(CONFIG_NAMESPACE, "default/dhcp4/eth0", "default DHCP", |r| r.is_some())
        .await;
    h.assert_eventually::<LinkSpec, _>(CONFIG_NAMESPACE, "default/eth0", "eth0 up by default", |r| r.is_some()).await;
    let lo =
        h.assert_eventually::<AddressSpec, _>(NAMESPACE, "lo/127.0.0.1/8", "merged loopback", |r| r.is_some()).await;
    assert_eq!(lo.unwrap().spec().config_layer, ConfigLayer::Default);

    // What a DHCP lease would offer for the same address, at the operator layer.
    let leased = AddressSpec::static_address("eth0", "192.168.1.2/24".parse().unwrap(), ConfigLayer::Operator);
    h.seed(CONFIG_NAMESPACE, "operator/eth0/192.168.1.2/24", leased.clone()).unwrap();
    h.assert_spec(NAMESPACE, "eth0/192.168.1.2/24", &leased).await;

    // The configuration's static address: a configuration-layer candidate that wins the merge,
    // eth0 configured at the configuration layer, and no DHCP operator for eth0 any more.
    h.seed(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, parse(STATIC_ETH0).unwrap()).unwrap();
    let configured =
        AddressSpec::static_address("eth0", "192.168.1.2/24".parse().unwrap(), ConfigLayer::MachineConfiguration);
    h.assert_spec(CONFIG_NAMESPACE, "configuration/eth0/192.168.1.2/24", &configured).await;
    h.assert_spec(NAMESPACE, "eth0/192.168.1.2/24", &configured).await;
    h.assert_absent::<OperatorSpec>(CONFIG_NAMESPACE, "default/dhcp4/eth0").await;
    h.assert_list::<OperatorSpec, _>(CONFIG_NAMESPACE, "no operator at all", |l| l.is_empty()).await;
    h.assert_absent::<LinkSpec>(CONFIG_NAMESPACE, "default/eth0").await;
    let eth0 = h
        .assert_eventually::<LinkSpec, _>(NAMESPACE, "eth0", "eth0 from the configuration", |r| {
            r.is_some_and(|r| r.spec().config_layer == ConfigLayer::MachineConfiguration)
        })
        .await
        .unwrap();
    assert!(eth0.spec().up);

    // The configuration removed: the default DHCP operator comes back, the static candidate
    // goes, and the lease's address is the one in force again.
    h.unseed::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID).unwrap();
    h.assert_eventually::<OperatorSpec, _>(CONFIG_NAMESPACE, "default/dhcp4/eth0", "default DHCP back", |r| {
        r.is_some()
    })
    .await;
    h.assert_absent::<AddressSpec>(CONFIG_NAMESPACE, "configuration/eth0/192.168.1.2/24").await;
    h.assert_spec(NAMESPACE, "eth0/192.168.1.2/24", &leased).await;
    h.assert_eventually::<LinkSpec, _>(NAMESPACE, "eth0", "eth0 back to default", |r| {
        r.is_some_and(|r| r.spec().config_layer == ConfigLayer::Default)
    })
    .await;

    // And with the lease gone too, nothing is left on eth0.
    h.unseed::<AddressSpec>(CONFIG_NAMESPACE, "operator/eth0/192.168.1.2/24").unwrap();
    h.assert_absent::<AddressSpec>(NAMESPACE, "eth0/192.168.1.2/24").await;
    h.stop().await;
}

#[tokio::test]
async fn dhcp_true_keeps_dhcp_at_the_configuration_layer() {
    let h = harness();
    seed_links(&h);
    let yaml = "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcp: true\n\
                \x20       addresses: [192.168.1.2/24]\n";
    h.seed(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, parse(yaml).unwrap()).unwrap();
    let op = h
        .assert_eventually::<OperatorSpec, _>(CONFIG_NAMESPACE, "configuration/dhcp4/eth0", "configured DHCP", |r| {
            r.is_some()
        })
        .await
        .unwrap();
    assert_eq!(op.spec().dhcp4.route_metric, talosbox::resources::network::DEFAULT_ROUTE_METRIC);
    h.assert_list::<OperatorSpec, _>(CONFIG_NAMESPACE, "only the configured one", |l| l.len() == 1).await;
    h.stop().await;
}

#[tokio::test]
async fn the_images_static_address_comes_up_without_dhcp_and_configuration_beats_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("platform-network.yaml");
    std::fs::write(&path, "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\naddresses:\n  - address: 10.5.0.2/24\n")
        .unwrap();
    let mut controllers: Vec<Box<dyn Controller>> = vec![
        Box::new(AddressConfigController::new()),
        Box::new(LinkConfigController::new()),
        Box::new(OperatorConfigController::new()),
        Box::new(talosbox::controllers::network::ImageNetworkConfigController::new(path)),
    ];
    controllers.extend(merge_controllers());
    let registry = std::sync::Arc::new(talosbox::resources::registry().unwrap());
    let h = Harness::start_with(talosbox::cosi::State::in_memory(), registry, controllers).unwrap();
    seed_links(&h);

    // The image's address is in force and eth0 runs no default DHCP.
    let image = AddressSpec::static_address("eth0", "10.5.0.2/24".parse().unwrap(), ConfigLayer::Platform);
    h.assert_spec(NAMESPACE, "eth0/10.5.0.2/24", &image).await;
    h.assert_eventually::<LinkSpec, _>(CONFIG_NAMESPACE, "platform/eth0", "eth0 from the image", |r| r.is_some()).await;
    h.assert_list::<OperatorSpec, _>(CONFIG_NAMESPACE, "no DHCP", |l| l.is_empty()).await;
    // (LinkConfigController still brings eth0 up at the default layer, as Talos's does; the
    // merge folds the image's candidate over it.)
    h.assert_eventually::<LinkSpec, _>(NAMESPACE, "eth0", "eth0 merged from the image", |r| {
        r.is_some_and(|r| r.spec().config_layer == ConfigLayer::Platform && r.spec().up)
    })
    .await;

    // An applied configuration with the same address wins over the image's.
    let yaml = "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [10.5.0.2/24]\n";
    h.seed(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, parse(yaml).unwrap()).unwrap();
    let configured = AddressSpec { config_layer: ConfigLayer::MachineConfiguration, ..image.clone() };
    h.assert_spec(NAMESPACE, "eth0/10.5.0.2/24", &configured).await;
    h.unseed::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID).unwrap();
    h.assert_spec(NAMESPACE, "eth0/10.5.0.2/24", &image).await;
    h.assert_list::<OperatorSpec, _>(CONFIG_NAMESPACE, "still no DHCP", |l| l.is_empty()).await;
    h.stop().await;
}
