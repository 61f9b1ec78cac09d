//! Routes: the desired ones and those the kernel reports.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{
    ConfigLayer, Family, NAMESPACE, RouteFlags, RouteProtocol, RouteType, RoutingTable, Scope, empty_as_none,
    is_default,
};
use crate::cosi::{PrintColumn, ResourceDefinition, ResourceSpec, Sensitivity};
use crate::types::IpPrefix;

/// The metric of default routes (Talos's `DefaultRouteMetric`).
pub const DEFAULT_ROUTE_METRIC: u32 = 1024;

/// Talos's route id: `[<table>/][<link>/ for inet6]<family>/<gateway>/<destination>/<priority>`,
/// the table only when it is not `main`, empty gateway and destination as empty strings.
pub fn route_id(
    table: RoutingTable,
    family: Family,
    destination: Option<&IpPrefix>,
    gateway: Option<&IpAddr>,
    priority: u32,
    out_link_name: &str,
) -> String {
    let mut prefix = String::new();
    if table != RoutingTable::MAIN {
        prefix.push_str(&format!("{table}/"));
    }
    if family == Family::INET6 {
        prefix.push_str(&format!("{out_link_name}/"));
    }
    let gw = gateway.map(ToString::to_string).unwrap_or_default();
    let dst = destination.map(ToString::to_string).unwrap_or_default();
    format!("{prefix}{family}/{gw}/{dst}/{priority}")
}

/// One next hop of a multipath route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteNextHop {
    #[serde(with = "empty_as_none")]
    pub gateway: Option<IpAddr>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub out_link_name: String,
    #[serde(skip_serializing_if = "is_default")]
    pub weight: u32,
}

/// A desired route. Merged id: [`route_id`]. No destination is the default route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteSpec {
    pub family: Family,
    #[serde(rename = "dst", with = "empty_as_none")]
    pub destination: Option<IpPrefix>,
    #[serde(rename = "src", with = "empty_as_none")]
    pub source: Option<IpAddr>,
    #[serde(with = "empty_as_none")]
    pub gateway: Option<IpAddr>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub out_link_name: String,
    pub table: RoutingTable,
    #[serde(skip_serializing_if = "is_default")]
    pub priority: u32,
    pub scope: Scope,
    #[serde(rename = "type")]
    pub route_type: RouteType,
    pub flags: RouteFlags,
    pub protocol: RouteProtocol,
    #[serde(rename = "layer")]
    pub config_layer: ConfigLayer,
    #[serde(skip_serializing_if = "is_default")]
    pub mtu: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub next_hops: Vec<RouteNextHop>,
}

impl RouteSpec {
    pub fn id(&self) -> String {
        route_id(
            self.table,
            self.family,
            self.destination.as_ref(),
            self.gateway.as_ref(),
            self.priority,
            &self.out_link_name,
        )
    }

    /// Talos's normalization: an all-zero destination, gateway or source means "none" (and
    /// says the family), and the scope follows from what is left: link for a directly
    /// connected destination, host for loopback, global otherwise (and for multipath).
    pub fn normalize(&mut self) {
        let unspecified = |ip: &IpAddr| ip.is_unspecified();
        if let Some(dst) = self.destination
            && dst.bits() == 0
            && unspecified(&dst.addr())
        {
            self.family = Family::of(&dst.addr());
            self.destination = None;
        }
        if let Some(gw) = self.gateway.filter(unspecified) {
            self.family = Family::of(&gw);
            self.gateway = None;
        }
        if let Some(src) = self.source.filter(unspecified) {
            self.family = Family::of(&src);
            self.source = None;
        }
        self.scope = if !self.next_hops.is_empty() {
            Scope::GLOBAL
        } else if self.gateway.is_none() && self.destination.is_some() {
            Scope::LINK
        } else if self.destination.is_some_and(|d| d.addr().is_loopback()) {
            Scope::HOST
        } else {
            Scope::GLOBAL
        };
    }
}

impl ResourceSpec for RouteSpec {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "RouteSpecs.net.talos.dev",
        aliases: &[],
        default_namespace: NAMESPACE,
        print_columns: &[],
        sensitivity: Sensitivity::NonSensitive,
    };
}

/// A route as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct RouteStatus {
    pub family: Family,
    #[serde(rename = "dst", with = "empty_as_none")]
    pub destination: Option<IpPrefix>,
    #[serde(rename = "src", with = "empty_as_none")]
    pub source: Option<IpAddr>,
    #[serde(with = "empty_as_none")]
    pub gateway: Option<IpAddr>,
    #[serde(skip_serializing_if = "is_default")]
    pub out_link_index: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub out_link_name: String,
    pub table: RoutingTable,
    pub priority: u32,
    pub scope: Scope,
    #[serde(rename = "type")]
    pub route_type: RouteType,
    pub flags: RouteFlags,
    pub protocol: RouteProtocol,
    #[serde(skip_serializing_if = "is_default")]
    pub mtu: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub next_hops: Vec<RouteNextHop>,
}

impl ResourceSpec for RouteStatus {
    const DEFINITION: ResourceDefinition = ResourceDefinition {
        type_name: "RouteStatuses.net.talos.dev",
        aliases: &["route", "routes"],
        default_namespace: NAMESPACE,
        print_columns: &[
            PrintColumn { name: "Destination", json_path: "{.dst}" },
            PrintColumn { name: "Gateway", json_path: "{.gateway}" },
            PrintColumn { name: "Link", json_path: "{.outLinkName}" },
            PrintColumn { name: "Metric", json_path: "{.priority}" },
        ],
        sensitivity: Sensitivity::NonSensitive,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network::test_util::{ip, prefix};

    #[test]
    fn route_ids_as_talos() {
        let gw = ip("10.0.0.1");
        let dst = prefix("10.2.0.0/16");
        let cases = [
            (route_id(RoutingTable::MAIN, Family::INET4, None, Some(&gw), 1024, "eth0"), "inet4/10.0.0.1//1024"),
            (route_id(RoutingTable::MAIN, Family::INET4, Some(&dst), None, 0, "eth0"), "inet4//10.2.0.0/16/0"),
            (route_id(RoutingTable(100), Family::INET4, None, Some(&gw), 10, "eth0"), "100/inet4/10.0.0.1//10"),
            (
                route_id(RoutingTable::LOCAL, Family::INET6, None, Some(&ip("fe80::1")), 1024, "eth1"),
                "local/eth1/inet6/fe80::1//1024",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }

    #[test]
    fn route_normalization() {
        // (destination, gateway, source, expected family, destination, gateway, scope)
        type Case =
            (Option<&'static str>, Option<&'static str>, Option<&'static str>, Family, Option<&'static str>, Scope);
        let cases: &[Case] = &[
            (Some("0.0.0.0/0"), Some("10.0.0.1"), Some("0.0.0.0"), Family::INET4, None, Scope::GLOBAL),
            (Some("::/0"), Some("fe80::1"), None, Family::INET6, None, Scope::GLOBAL),
            (Some("10.2.0.0/16"), None, None, Family::INET4, Some("10.2.0.0/16"), Scope::LINK),
            (Some("10.2.0.0/16"), Some("0.0.0.0"), None, Family::INET4, Some("10.2.0.0/16"), Scope::LINK),
            (Some("127.0.0.0/8"), Some("127.0.0.1"), None, Family::INET4, Some("127.0.0.0/8"), Scope::HOST),
        ];
        for (dst, gw, src, family, want_dst, scope) in cases {
            let mut r = RouteSpec {
                family: Family::INET4,
                destination: dst.map(prefix),
                gateway: gw.map(ip),
                source: src.map(ip),
                ..RouteSpec::default()
            };
            r.normalize();
            assert_eq!(
                (r.family, r.destination, r.scope),
                (*family, want_dst.map(prefix), *scope),
                "{dst:?} via {gw:?}"
            );
            assert!(r.source.is_none_or(|s| !s.is_unspecified()));
            assert!(r.gateway.is_none_or(|g| !g.is_unspecified()));
        }
    }
}
