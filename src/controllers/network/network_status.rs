//! `NetworkStatusController` (Talos's network `StatusController`): whether networking is
//! ready, as the network `Status` (id `status`) the boot sequence and `talosctl` wait on. An
//! aggregate of what others observed, decided by a pure function: the node has a current
//! address (the `current` node addresses never hold loopback), a default route exists, the
//! hostname is set, and `hosts` and `resolv.conf` are on disk. It never changes anything.

use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::files::{self, EtcFileStatus};
use crate::resources::network::{HostnameStatus, NAMESPACE, NetworkStatus, NodeAddress, RouteStatus};

/// The files that must be rendered for the etc-files bit, as in Talos.
pub(crate) const REQUIRED_ETC_FILES: [&str; 2] = ["hosts", "resolv.conf"];

pub struct NetworkStatusController;

/// A default route: no destination, or one of length zero.
fn is_default_route(route: &RouteStatus) -> bool {
    route.destination.is_none_or(|d| d.bits() == 0)
}

pub(crate) fn network_status(
    current: Option<&NodeAddress>,
    routes: &[RouteStatus],
    hostname: bool,
    etc_files_on_disk: &[&str],
) -> NetworkStatus {
    NetworkStatus {
        address_ready: current.is_some_and(|c| !c.addresses.is_empty()),
        connectivity_ready: routes.iter().any(is_default_route),
        hostname_ready: hostname,
        etc_files_ready: REQUIRED_ETC_FILES.iter().all(|f| etc_files_on_disk.contains(f)),
    }
}

#[async_trait::async_trait]
impl Controller for NetworkStatusController {
    fn name(&self) -> String {
        "NetworkStatusController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak::<NodeAddress>(NAMESPACE).with_id(NodeAddress::CURRENT_ID),
            Input::weak::<RouteStatus>(NAMESPACE),
            Input::weak::<HostnameStatus>(NAMESPACE).with_id(HostnameStatus::ID),
            Input::weak::<EtcFileStatus>(files::NAMESPACE),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<NetworkStatus>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let current = ctx.get::<NodeAddress>(NAMESPACE, NodeAddress::CURRENT_ID)?.filter(|r| r.is_running());
        let routes: Vec<RouteStatus> = ctx
            .list::<RouteStatus>(NAMESPACE)?
            .into_iter()
            .filter(|r| r.is_running())
            .map(|r| r.spec().clone())
            .collect();
        let hostname = ctx.get::<HostnameStatus>(NAMESPACE, HostnameStatus::ID)?.is_some_and(|r| r.is_running());
        let on_disk = ctx.list::<EtcFileStatus>(files::NAMESPACE)?;
        let on_disk: Vec<&str> = on_disk.iter().filter(|r| r.is_running()).map(|r| r.id()).collect();
        let status = network_status(current.as_ref().map(|c| c.spec()), &routes, hostname, &on_disk);
        ctx.apply(NAMESPACE, NetworkStatus::ID, status)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosi::Harness;
    use crate::resources::network::AddressSortAlgorithm;
    use crate::types::IpPrefix;

    fn route(dst: Option<&str>) -> RouteStatus {
        RouteStatus { destination: dst.map(|d| d.parse().unwrap()), ..RouteStatus::default() }
    }

    fn current(list: &[&str]) -> NodeAddress {
        NodeAddress {
            addresses: list.iter().map(|s| s.parse::<IpPrefix>().unwrap()).collect(),
            sort_algorithm: AddressSortAlgorithm::V1,
        }
    }

    #[test]
    fn status_table() {
        let none = network_status(None, &[], false, &[]);
        assert_eq!(none, NetworkStatus::default(), "nothing known: nothing ready");
        let s = network_status(Some(&current(&[])), &[route(Some("10.0.0.0/24"))], false, &["hosts"]);
        assert_eq!(s, NetworkStatus::default(), "no address, only a link route, resolv.conf missing");
        let s = network_status(
            Some(&current(&["10.0.0.2/24"])),
            &[route(Some("10.0.0.0/24")), route(None)],
            true,
            &["resolv.conf", "hosts", "hostname"],
        );
        assert_eq!(
            s,
            NetworkStatus {
                address_ready: true,
                connectivity_ready: true,
                hostname_ready: true,
                etc_files_ready: true
            }
        );
        assert!(network_status(None, &[route(Some("::/0"))], false, &[]).connectivity_ready, "a /0 is default");
    }

    #[tokio::test]
    async fn the_status_follows_its_inputs() {
        let h = Harness::start(vec![Box::new(NetworkStatusController) as Box<dyn Controller>]).unwrap();
        h.assert_spec(NAMESPACE, NetworkStatus::ID, &NetworkStatus::default()).await;
        h.seed(NAMESPACE, NodeAddress::CURRENT_ID, current(&["10.0.0.2/24"])).unwrap();
        h.seed(NAMESPACE, "inet4/10.0.0.1//1024", route(None)).unwrap();
        h.seed(NAMESPACE, HostnameStatus::ID, HostnameStatus { hostname: "n".into(), domainname: String::new() })
            .unwrap();
        h.seed(files::NAMESPACE, "hosts", EtcFileStatus { spec_version: "1".into() }).unwrap();
        let almost = NetworkStatus {
            address_ready: true,
            connectivity_ready: true,
            hostname_ready: true,
            etc_files_ready: false,
        };
        h.assert_spec(NAMESPACE, NetworkStatus::ID, &almost).await;
        h.seed(files::NAMESPACE, "resolv.conf", EtcFileStatus { spec_version: "1".into() }).unwrap();
        h.assert_spec(NAMESPACE, NetworkStatus::ID, &NetworkStatus { etc_files_ready: true, ..almost.clone() }).await;
        h.unseed::<RouteStatus>(NAMESPACE, "inet4/10.0.0.1//1024").unwrap();
        h.assert_spec(
            NAMESPACE,
            NetworkStatus::ID,
            &NetworkStatus { etc_files_ready: true, connectivity_ready: false, ..almost },
        )
        .await;
        h.stop().await;
    }

    #[tokio::test]
    async fn etc_files_are_ready_once_rendered_and_on_disk() {
        use crate::controllers::files::EtcFileSpecController;
        use crate::controllers::network::EtcFileController;
        use crate::resources::network::{HostDnsConfig, ResolverStatus};

        let dir = tempfile::tempdir().unwrap();
        let controllers: Vec<Box<dyn Controller>> = vec![
            Box::new(EtcFileController),
            Box::new(EtcFileSpecController::new(dir.path())),
            Box::new(NetworkStatusController),
        ];
        let h = Harness::start(controllers).unwrap();
        h.assert_spec(files::NAMESPACE, "hosts", &EtcFileStatus { spec_version: "1".into() }).await;
        let status = h.state().find::<NetworkStatus>(NAMESPACE, NetworkStatus::ID).unwrap();
        assert!(status.is_none_or(|s| !s.spec().etc_files_ready), "no resolv.conf yet: not ready");
        let resolvers = ResolverStatus { dns_servers: vec!["10.0.0.1".parse().unwrap()], search_domains: vec![] };
        h.seed(NAMESPACE, ResolverStatus::ID, resolvers).unwrap();
        h.seed(NAMESPACE, HostDnsConfig::ID, HostDnsConfig { enabled: true, ..Default::default() }).unwrap();
        h.assert_eventually::<NetworkStatus, _>(NAMESPACE, NetworkStatus::ID, "etc files ready", |r| {
            r.is_some_and(|r| r.spec().etc_files_ready)
        })
        .await;
        let resolv = std::fs::read_to_string(dir.path().join("resolv.conf")).unwrap();
        assert_eq!(resolv, "nameserver 127.0.0.53\n");
        assert!(std::fs::read_to_string(dir.path().join("hosts")).unwrap().starts_with("127.0.0.1 localhost\n"));
        h.stop().await;
    }
}
