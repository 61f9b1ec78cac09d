//! `EtcFileController`: the classic files some software still reads, rendered one way from
//! the network resources into `EtcFileSpec`s (`files` namespace) as Talos does:
//! `resolv.conf` from the `ResolverStatus` (or the host DNS forwarder's `127.0.0.53` while it
//! is enabled), `hosts` from the hostname, the default node address and the configured static
//! host entries, and `hostname` from the `HostnameStatus`.
//!
//! The renders are pure functions; the writing is `EtcFileSpecController`'s. Nothing here
//! reads back from the files: a hand edit is overwritten, never merged.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use crate::config::{Config, Path, Value};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::config::{self as cfg, MachineConfig};
use crate::resources::files::{self, EtcFileSpec};
use crate::resources::network::{HostDnsConfig, HostnameStatus, NAMESPACE, NodeAddress, ResolverStatus};

/// The host DNS forwarder's address, what `resolv.conf` names while it is enabled.
pub const HOST_DNS_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 53));

/// glibc reads at most three nameservers (`MAXNS` in resolv.conf(5)).
const MAX_NAMESERVERS: usize = 3;

const MODE: u32 = 0o644;

pub struct EtcFileController;

/// `resolv.conf`: up to three nameservers, then the search domains.
pub fn render_resolv_conf(nameservers: &[IpAddr], search_domains: &[String]) -> String {
    let mut out = String::new();
    for ns in nameservers.iter().take(MAX_NAMESERVERS) {
        out.push_str(&format!("nameserver {ns}\n"));
    }
    if !search_domains.is_empty() {
        out.push_str(&format!("\nsearch {}\n", search_domains.join(" ")));
    }
    out
}

/// The nameservers `resolv.conf` names: the forwarder while it is enabled, else the
/// resolvers in force.
pub fn pick_nameservers(host_dns: &HostDnsConfig, resolvers: &ResolverStatus) -> Vec<IpAddr> {
    if host_dns.enabled { vec![HOST_DNS_ADDRESS] } else { resolvers.dns_servers.clone() }
}

/// One `hosts` line: an address and its names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    pub ip: String,
    pub aliases: Vec<String>,
}

/// `hosts`: localhost, the node's own name on its default address, the IPv6 names, then the
/// static entries grouped by address (sorted by address text, as Talos does), with the
/// address column padded to one width.
pub fn render_hosts(hostname: Option<&HostnameStatus>, default: Option<&NodeAddress>, statics: &[HostEntry]) -> String {
    let mut lines: Vec<(String, String)> = vec![("127.0.0.1".into(), "localhost".into())];
    if let (Some(hostname), Some(addr)) = (hostname, default.and_then(|d| d.addresses.first())) {
        let fqdn = hostname.fqdn();
        let mut names = fqdn.clone();
        if hostname.hostname != fqdn {
            names.push(' ');
            names.push_str(&hostname.hostname);
        }
        lines.push((addr.addr().to_string(), names));
    }
    lines.push(("::1".into(), "localhost ip6-localhost ip6-loopback".into()));
    lines.push(("ff02::1".into(), "ip6-allnodes".into()));
    lines.push(("ff02::2".into(), "ip6-allrouters".into()));
    let mut by_ip: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for entry in statics {
        by_ip.entry(&entry.ip).or_default().extend(entry.aliases.iter().map(String::as_str));
    }
    for (ip, aliases) in by_ip {
        lines.push((ip.to_string(), aliases.join(" ")));
    }
    let width = lines.iter().map(|(ip, _)| ip.len()).max().unwrap_or(0) + 1;
    lines.iter().map(|(ip, names)| format!("{ip:<width$}{names}\n")).collect()
}

/// `hostname`: the short name, one line, as hostname(5) asks.
pub fn render_hostname(hostname: &HostnameStatus) -> String {
    format!("{}\n", hostname.hostname)
}

/// The configured static host entries: v1alpha1's `machine.network.extraHostEntries`, then
/// each `StaticHostConfig` document (its name is the address).
pub fn static_hosts(config: &Config) -> Vec<HostEntry> {
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_list).unwrap_or_default().iter().filter_map(Value::as_str).map(str::to_string).collect()
    };
    let mut out = Vec::new();
    if let Some(doc) = config.v1alpha1() {
        let entries = doc.value().at(&Path::keys("machine.network.extraHostEntries")).and_then(Value::as_list);
        for entry in entries.unwrap_or_default() {
            if let Some(ip) = entry.at(&Path::keys("ip")).and_then(Value::as_str) {
                out.push(HostEntry { ip: ip.to_string(), aliases: strings(entry.at(&Path::keys("aliases"))) });
            }
        }
    }
    for doc in config.by_kind("StaticHostConfig") {
        if let Some(ip) = doc.name() {
            out.push(HostEntry { ip: ip.to_string(), aliases: strings(doc.value().at(&Path::keys("hostnames"))) });
        }
    }
    out
}

/// A resource that is not on its way out.
fn running<T: crate::cosi::ResourceSpec>(r: Option<crate::cosi::Resource<T>>) -> Option<crate::cosi::Resource<T>> {
    r.filter(|r| r.is_running())
}

fn etc_file(contents: String) -> EtcFileSpec {
    EtcFileSpec { contents, mode: MODE, selinux_label: String::new() }
}

#[async_trait::async_trait]
impl Controller for EtcFileController {
    fn name(&self) -> String {
        "EtcFileController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak::<MachineConfig>(cfg::NAMESPACE).with_id(MachineConfig::ACTIVE_ID),
            Input::weak::<HostnameStatus>(NAMESPACE).with_id(HostnameStatus::ID),
            Input::weak::<ResolverStatus>(NAMESPACE).with_id(ResolverStatus::ID),
            Input::weak::<NodeAddress>(NAMESPACE).with_id(NodeAddress::DEFAULT_ID),
            Input::weak::<HostDnsConfig>(NAMESPACE).with_id(HostDnsConfig::ID),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        // Shared, as in Talos: other controllers render other files under /etc.
        vec![Output::shared::<EtcFileSpec>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let statics = match running(ctx.get::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID)?) {
            Some(mc) => mc.spec().parsed().map(|p| static_hosts(&p.config)).unwrap_or_default(),
            None => Vec::new(),
        };
        let hostname = running(ctx.get::<HostnameStatus>(NAMESPACE, HostnameStatus::ID)?);
        let resolvers = running(ctx.get::<ResolverStatus>(NAMESPACE, ResolverStatus::ID)?);
        let default = running(ctx.get::<NodeAddress>(NAMESPACE, NodeAddress::DEFAULT_ID)?);
        let host_dns = running(ctx.get::<HostDnsConfig>(NAMESPACE, HostDnsConfig::ID)?);

        ctx.start_tracking_outputs();
        // Like Talos, resolv.conf waits for both: written before the host DNS settings are
        // known, it would name the upstreams and then flip to the forwarder.
        if let (Some(resolvers), Some(host_dns)) = (&resolvers, &host_dns) {
            let nameservers = pick_nameservers(host_dns.spec(), resolvers.spec());
            let text = render_resolv_conf(&nameservers, &resolvers.spec().search_domains);
            ctx.apply(files::NAMESPACE, "resolv.conf", etc_file(text))?;
        }
        let hosts = render_hosts(hostname.as_ref().map(|h| h.spec()), default.as_ref().map(|d| d.spec()), &statics);
        ctx.apply(files::NAMESPACE, "hosts", etc_file(hosts))?;
        if let Some(hostname) = &hostname {
            ctx.apply(files::NAMESPACE, "hostname", etc_file(render_hostname(hostname.spec())))?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::golden;
    use crate::cosi::Harness;
    use crate::resources::network::AddressSortAlgorithm;
    use crate::types::IpPrefix;

    const TESTDATA: &str = "src/controllers/network/testdata/etc";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn node(prefix: &str) -> NodeAddress {
        NodeAddress { addresses: vec![prefix.parse::<IpPrefix>().unwrap()], sort_algorithm: AddressSortAlgorithm::V1 }
    }

    fn host(hostname: &str, domainname: &str) -> HostnameStatus {
        HostnameStatus { hostname: hostname.into(), domainname: domainname.into() }
    }

    #[test]
    fn resolv_conf_golden() {
        let four = [ip("10.0.0.1"), ip("2001:db8::53"), ip("10.0.0.2"), ip("10.0.0.3")];
        let domains = vec!["example.test".to_string(), "corp.example".to_string()];
        golden::check_in(TESTDATA, "resolv.conf.upstreams.golden", &render_resolv_conf(&four, &domains));
        golden::check_in(TESTDATA, "resolv.conf.nodomains.golden", &render_resolv_conf(&four[..1], &[]));
        let resolvers = ResolverStatus { dns_servers: four.to_vec(), search_domains: domains.clone() };
        let on = HostDnsConfig { enabled: true, ..Default::default() };
        let text = render_resolv_conf(&pick_nameservers(&on, &resolvers), &resolvers.search_domains);
        golden::check_in(TESTDATA, "resolv.conf.hostdns.golden", &text);
        let off = HostDnsConfig::default();
        assert_eq!(pick_nameservers(&off, &resolvers), four, "forwarder off: the upstreams");
    }

    #[test]
    fn hosts_golden() {
        let statics = vec![
            HostEntry { ip: "192.168.1.100".into(), aliases: vec!["db".into(), "db.local".into()] },
            HostEntry { ip: "10.5.0.1".into(), aliases: vec!["gw".into()] },
            HostEntry { ip: "192.168.1.100".into(), aliases: vec!["db-alias".into()] },
        ];
        let h = host("node1", "example.test");
        golden::check_in(TESTDATA, "hosts.full.golden", &render_hosts(Some(&h), Some(&node("10.0.0.2/24")), &statics));
        let short = host("node1", "");
        golden::check_in(TESTDATA, "hosts.short.golden", &render_hosts(Some(&short), Some(&node("10.0.0.2/24")), &[]));
        golden::check_in(TESTDATA, "hosts.bare.golden", &render_hosts(Some(&h), None, &[]));
        assert_eq!(render_hostname(&h), "node1\n");
    }

    #[test]
    fn static_hosts_from_both_document_kinds() {
        let text = "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    extraHostEntries:\n      - ip: 10.5.0.1\n        aliases: [gw, gateway]\n---\napiVersion: v1alpha1\nkind: StaticHostConfig\nname: 192.168.1.100\nhostnames: [db]\n";
        let config = crate::config::load(text).unwrap().config;
        assert_eq!(
            static_hosts(&config),
            [
                HostEntry { ip: "10.5.0.1".into(), aliases: vec!["gw".into(), "gateway".into()] },
                HostEntry { ip: "192.168.1.100".into(), aliases: vec!["db".into()] },
            ]
        );
    }

    #[tokio::test]
    async fn the_controller_renders_as_inputs_arrive() {
        let h = Harness::start(vec![Box::new(EtcFileController) as Box<dyn Controller>]).unwrap();
        let file = |text: &str| etc_file(text.to_string());
        h.assert_spec(files::NAMESPACE, "hosts", &file(&render_hosts(None, None, &[]))).await;
        assert!(h.state().find::<EtcFileSpec>(files::NAMESPACE, "resolv.conf").unwrap().is_none());

        let resolvers = ResolverStatus { dns_servers: vec![ip("10.0.0.1")], search_domains: vec![] };
        h.seed(NAMESPACE, ResolverStatus::ID, resolvers).unwrap();
        h.seed(NAMESPACE, HostDnsConfig::ID, HostDnsConfig::default()).unwrap();
        h.assert_spec(files::NAMESPACE, "resolv.conf", &file("nameserver 10.0.0.1\n")).await;
        h.seed(NAMESPACE, HostDnsConfig::ID, HostDnsConfig { enabled: true, ..Default::default() }).unwrap();
        h.assert_spec(files::NAMESPACE, "resolv.conf", &file("nameserver 127.0.0.53\n")).await;

        h.seed(NAMESPACE, HostnameStatus::ID, host("node1", "")).unwrap();
        h.seed(NAMESPACE, NodeAddress::DEFAULT_ID, node("10.0.0.2/24")).unwrap();
        h.assert_spec(files::NAMESPACE, "hostname", &file("node1\n")).await;
        let want = render_hosts(Some(&host("node1", "")), Some(&node("10.0.0.2/24")), &[]);
        assert!(want.contains("10.0.0.2  node1\n"), "{want}");
        h.assert_spec(files::NAMESPACE, "hosts", &file(&want)).await;
        h.stop().await;
    }
}
