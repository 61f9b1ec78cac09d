//! `HostnameSpecController` and `HostnameStatusController` against this host's kernel, each
//! test in a fresh UTS namespace entered only by short-lived threads: the host's hostname is
//! never touched (and checked to be unchanged). Needs root (CI runs as root); without it the
//! tests fail loudly rather than pass.

use std::time::Duration;

use talosbox::controllers::network::{HostnameMergeController, HostnameSpecController, HostnameStatusController};
use talosbox::cosi::{Controller, Harness};
use talosbox::kernel::uts::{self, UtsNames, UtsNs, UtsTarget, UtsWatch};
use talosbox::resources::network::{
    CONFIG_NAMESPACE, ConfigLayer, HostnameSpec, HostnameStatus, NAMESPACE, layered_id,
};

const WAIT: Duration = Duration::from_secs(10);

fn fresh_uts() -> UtsNs {
    assert!(
        rustix::process::geteuid().is_root(),
        "network_hostname tests need root (UTS namespaces, sethostname); run them as root as CI does"
    );
    let ns = UtsNs::new().expect("creating a UTS namespace");
    assert!(!ns.same_as(&UtsNs::current().unwrap()).unwrap(), "the fresh namespace is the host's");
    ns
}

fn names(hostname: &str, domainname: &str) -> UtsNames {
    UtsNames { hostname: hostname.into(), domainname: domainname.into() }
}

/// Waits, driven by the kernel's name-change signal, until the namespace holds `want`.
async fn kernel_eventually(ns: &UtsNs, watch: &mut UtsWatch, want: &UtsNames) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now = ns.run(uts::names).unwrap();
        if now == *want {
            return;
        }
        match tokio::time::timeout_at(deadline, watch.changed()).await {
            Ok(changed) => changed.unwrap(),
            Err(_) => panic!("timed out after {WAIT:?} waiting for the names {want:?}; last seen {now:?}"),
        }
    }
}

fn want(h: &Harness, spec: HostnameSpec) {
    h.seed(CONFIG_NAMESPACE, &layered_id(spec.config_layer, HostnameSpec::ID), spec).unwrap();
}

async fn assert_status(h: &Harness, hostname: &str, domainname: &str) {
    let want = HostnameStatus { hostname: hostname.into(), domainname: domainname.into() };
    h.assert_spec(NAMESPACE, HostnameStatus::ID, &want).await;
}

#[tokio::test]
async fn the_status_mirrors_the_namespaces_names() {
    let ns = fresh_uts();
    let host = uts::names();
    ns.run(|| uts::set_names(&names("(none)", "(none)"))).unwrap().unwrap();
    let controllers: Vec<Box<dyn Controller>> =
        vec![Box::new(HostnameStatusController::new(UtsTarget::Namespace(ns.clone())))];
    let h = Harness::start(controllers).unwrap();
    // The kernel's "(none)" is no hostname: no status.
    h.assert_absent::<HostnameStatus>(NAMESPACE, HostnameStatus::ID).await;

    ns.run(|| uts::set_names(&names("seen", "example.org"))).unwrap().unwrap();
    assert_status(&h, "seen", "example.org").await;
    ns.run(|| uts::set_names(&names("seen", ""))).unwrap().unwrap();
    assert_status(&h, "seen", "").await;
    h.stop().await;
    assert_eq!(uts::names(), host, "the host's names are untouched");
}

#[tokio::test]
async fn the_merged_hostname_is_set_and_put_back() {
    let ns = fresh_uts();
    let host = uts::names();
    let target = UtsTarget::Namespace(ns.clone());
    let controllers: Vec<Box<dyn Controller>> = vec![
        Box::new(HostnameMergeController::new(CONFIG_NAMESPACE, NAMESPACE)),
        Box::new(HostnameSpecController::new(target.clone())),
        Box::new(HostnameStatusController::new(target)),
    ];
    let h = Harness::start(controllers).unwrap();
    let mut watch = UtsWatch::open().unwrap();
    want(&h, HostnameSpec::from_fqdn("low.example.net", ConfigLayer::Default).unwrap());
    want(&h, HostnameSpec::from_fqdn("node1.example.org", ConfigLayer::MachineConfiguration).unwrap());
    kernel_eventually(&ns, &mut watch, &names("node1", "example.org")).await;
    assert_status(&h, "node1", "example.org").await;

    // Set behind its back: put back.
    ns.run(|| uts::set_names(&names("intruder", ""))).unwrap().unwrap();
    kernel_eventually(&ns, &mut watch, &names("node1", "example.org")).await;

    // The configuration goes: the lower layer's name takes over.
    h.unseed::<HostnameSpec>(CONFIG_NAMESPACE, &layered_id(ConfigLayer::MachineConfiguration, HostnameSpec::ID))
        .unwrap();
    kernel_eventually(&ns, &mut watch, &names("low", "example.net")).await;
    assert_status(&h, "low", "example.net").await;
    h.stop().await;
    assert_eq!(uts::names(), host, "the host's names are untouched");
}
