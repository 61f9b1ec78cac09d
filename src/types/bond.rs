//! A bond's settings, one type for every layer: the configuration parses into it, the
//! resources show it (as Talos's `BondMasterSpec`, under its YAML names) and the kernel
//! adapter sends and reads it as `IFLA_BOND_*` attributes. Each enumerated setting is the
//! bonding driver's number with the driver's names (`BOND_MODE_*` …), so a value the kernel
//! reports that has no name passes through as its number.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::{is_default, named_number};

named_number! {
    /// Bonding mode, as the bonding driver names it.
    BondMode(u8), "bond mode" {
        ROUND_ROBIN = 0 => "balance-rr", ACTIVE_BACKUP = 1 => "active-backup", XOR = 2 => "balance-xor",
        BROADCAST = 3 => "broadcast", IEEE_802_3AD = 4 => "802.3ad", TLB = 5 => "balance-tlb",
        ALB = 6 => "balance-alb",
    }
}

named_number! {
    BondXmitHashPolicy(u8), "xmit hash policy" {
        LAYER2 = 0 => "layer2", LAYER34 = 1 => "layer3+4", LAYER23 = 2 => "layer2+3", ENCAP23 = 3 => "encap2+3",
        ENCAP34 = 4 => "encap3+4",
    }
}

named_number! {
    LacpRate(u8), "lacp rate" { SLOW = 0 => "slow", FAST = 1 => "fast" }
}

named_number! {
    ArpValidate(u32), "arp validate" {
        NONE = 0 => "none", ACTIVE = 1 => "active", BACKUP = 2 => "backup", ALL = 3 => "all", FILTER = 4 => "filter",
        FILTER_ACTIVE = 5 => "filter-active", FILTER_BACKUP = 6 => "filter-backup",
    }
}

named_number! {
    ArpAllTargets(u32), "arp all targets" { ANY = 0 => "any", ALL = 1 => "all" }
}

named_number! {
    PrimaryReselect(u8), "primary reselect" { ALWAYS = 0 => "always", BETTER = 1 => "better", FAILURE = 2 => "failure" }
}

named_number! {
    FailOverMac(u8), "fail over mac" { NONE = 0 => "none", ACTIVE = 1 => "active", FOLLOW = 2 => "follow" }
}

named_number! {
    AdSelect(u8), "ad select" { STABLE = 0 => "stable", BANDWIDTH = 1 => "bandwidth", COUNT = 2 => "count" }
}

named_number! {
    AdLacpActive(u8), "ad lacp active" { ON = 1 => "on", OFF = 0 => "off" }
}

/// A bond's settings, as the bonding driver names them. The primary is said two ways: by
/// name (`primary`, what the configuration and the specs say) and by index (`primary_index`,
/// what the kernel is sent and reports).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct BondSettings {
    pub mode: BondMode,
    #[serde(rename = "xmitHashPolicy")]
    pub hash_policy: BondXmitHashPolicy,
    pub lacp_rate: LacpRate,
    #[serde(rename = "arpValidate")]
    pub arp_validate: ArpValidate,
    #[serde(rename = "arpAllTargets")]
    pub arp_all_targets: ArpAllTargets,
    /// The primary slave's index as the kernel reports it, and as it is sent (`None` leaves the
    /// kernel's as it is); configuration sets `primary`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_index: Option<u32>,
    pub primary_reselect: PrimaryReselect,
    pub fail_over_mac: FailOverMac,
    #[serde(rename = "adSelect", skip_serializing_if = "is_default")]
    pub ad_select: AdSelect,
    #[serde(rename = "miimon", skip_serializing_if = "is_default")]
    pub mii_mon: u32,
    #[serde(rename = "updelay", skip_serializing_if = "is_default")]
    pub up_delay: u32,
    #[serde(rename = "downdelay", skip_serializing_if = "is_default")]
    pub down_delay: u32,
    #[serde(rename = "arpInterval", skip_serializing_if = "is_default")]
    pub arp_interval: u32,
    #[serde(rename = "resendIgmp", skip_serializing_if = "is_default")]
    pub resend_igmp: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub min_links: u32,
    #[serde(rename = "lpInterval", skip_serializing_if = "is_default")]
    pub lp_interval: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub packets_per_slave: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub num_peer_notif: u8,
    #[serde(rename = "tlbLogicalLb", skip_serializing_if = "is_default")]
    pub tlb_dynamic_lb: u8,
    #[serde(skip_serializing_if = "is_default")]
    pub all_slaves_active: u8,
    #[serde(skip_serializing_if = "is_default")]
    pub use_carrier: bool,
    #[serde(rename = "adActorSysPrio", skip_serializing_if = "is_default")]
    pub ad_actor_sys_prio: u16,
    #[serde(rename = "adUserPortKey", skip_serializing_if = "is_default")]
    pub ad_user_port_key: u16,
    #[serde(skip_serializing_if = "is_default")]
    pub peer_notify_delay: u32,
    /// IPv4 only reach the kernel, as `ns_ip6_targets` IPv6 only.
    #[serde(rename = "arpIpTargets", skip_serializing_if = "Vec::is_empty")]
    pub arp_ip_targets: Vec<IpAddr>,
    #[serde(rename = "nsIp6Targets", skip_serializing_if = "Vec::is_empty")]
    pub ns_ip6_targets: Vec<IpAddr>,
    #[serde(rename = "adLacpActive", skip_serializing_if = "Option::is_none")]
    pub ad_lacp_active: Option<AdLacpActive>,
    #[serde(skip_serializing_if = "is_default")]
    pub missed_max: u8,
    /// The name of the primary slave (active-backup, balance-tlb, balance-alb).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub primary: String,
}

impl BondSettings {
    /// Talos's defaults for settings left zero, matching what the kernel reports back for
    /// a new bond (so the spec and the status compare equal).
    pub fn fill_defaults(&mut self) {
        // Linux 6.18 locks use_carrier on.
        self.use_carrier = true;
        for v in [&mut self.resend_igmp, &mut self.lp_interval, &mut self.packets_per_slave] {
            if *v == 0 {
                *v = 1;
            }
        }
        if self.num_peer_notif == 0 {
            self.num_peer_notif = 1;
        }
        let tlb_alb = self.mode == BondMode::ALB || self.mode == BondMode::TLB;
        if !tlb_alb {
            self.tlb_dynamic_lb = 1;
        }
        if self.mode == BondMode::IEEE_802_3AD && self.ad_actor_sys_prio == 0 {
            self.ad_actor_sys_prio = 65535;
        }
        if !tlb_alb && self.mode != BondMode::IEEE_802_3AD && self.missed_max == 0 {
            self.missed_max = 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bond_defaults_as_talos() {
        let mut rr = BondSettings::default();
        rr.fill_defaults();
        let want = BondSettings {
            resend_igmp: 1,
            lp_interval: 1,
            packets_per_slave: 1,
            num_peer_notif: 1,
            tlb_dynamic_lb: 1,
            use_carrier: true,
            missed_max: 2,
            ..BondSettings::default()
        };
        assert_eq!(rr, want);
        let mut lacp = BondSettings { mode: BondMode::IEEE_802_3AD, ..BondSettings::default() };
        lacp.fill_defaults();
        assert_eq!((lacp.ad_actor_sys_prio, lacp.missed_max, lacp.tlb_dynamic_lb), (65535, 0, 1));
        let mut alb = BondSettings { mode: BondMode::ALB, ..BondSettings::default() };
        alb.fill_defaults();
        assert_eq!((alb.ad_actor_sys_prio, alb.missed_max, alb.tlb_dynamic_lb), (0, 0, 0));
    }
}
