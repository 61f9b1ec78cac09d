//! What the machine-configuration network controllers share: reading the active machine
//! config's network view, the node's links, and writing a candidate under its layered id.
//! Not a controller: each config controller calls these from its own reconcile.

use crate::config::NetworkView;
use crate::config::network::Device;
use crate::cosi::{Context, Input, Output, Pointer, ReconcileError, ResourceSpec};
use crate::kernel::cmdline::Cmdline;
use crate::network::cmdline::{CmdlineNetworking, LinkResolver};
use crate::network::config::resolve_devices;
use crate::resources::config::{self as cfg, MachineConfig};
use crate::resources::network::{
    AddressSpec, CONFIG_NAMESPACE, ConfigLayer, HostnameSpec, LinkSpec, LinkStatus, NAMESPACE, OperatorSpec,
    ResolverSpec, RouteSpec, TimeServerSpec, layered_id,
};
use crate::resources::runtime::{self, KernelCmdline};

use super::link_resolver;

/// The active machine configuration, as every config controller watches it.
pub(crate) fn machine_config_input() -> Input {
    Input::weak::<MachineConfig>(cfg::NAMESPACE).with_id(MachineConfig::ACTIVE_ID)
}

/// The network view of the active machine configuration; `None` when there is none. A
/// configuration whose networking does not read (one stored before validation knew it)
/// fails the `MachineConfig` key with the reason and contributes nothing, so the defaults
/// stay in force rather than half a configuration.
pub(crate) fn network_view(ctx: &mut Context) -> Result<Option<NetworkView>, ReconcileError> {
    let Some(mc) = ctx.get::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID)? else { return Ok(None) };
    if !mc.is_running() {
        return Ok(None);
    }
    let Some(parsed) = mc.spec().parsed() else { return Ok(None) };
    match &parsed.network {
        Ok(view) => Ok(Some(view.clone())),
        Err(e) => {
            ctx.fail_key(
                Pointer::of::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID),
                format!("machine configuration networking ignored: {e}"),
            );
            Ok(None)
        }
    }
}

/// The node's links by name.
pub(crate) fn link_statuses(ctx: &Context) -> Result<Vec<(String, LinkStatus)>, ReconcileError> {
    Ok(ctx.list::<LinkStatus>(NAMESPACE)?.into_iter().map(|r| (r.id().to_string(), r.spec().clone())).collect())
}

/// Every kind of candidate a source writes, shared with the other sources: what the
/// command-line, image and platform controllers each declare.
pub(crate) fn candidate_outputs() -> Vec<Output> {
    vec![
        Output::shared::<AddressSpec>(),
        Output::shared::<RouteSpec>(),
        Output::shared::<LinkSpec>(),
        Output::shared::<HostnameSpec>(),
        Output::shared::<ResolverSpec>(),
        Output::shared::<TimeServerSpec>(),
        Output::shared::<OperatorSpec>(),
    ]
}

/// The kernel command line, as the controllers that must know what it configures watch it.
pub(crate) fn cmdline_input() -> Input {
    Input::weak::<KernelCmdline>(runtime::NAMESPACE).with_id(KernelCmdline::ID)
}

/// The command line's networking, when there is a command line and it reads (a bad one is
/// `CmdlineConfigController`'s to report).
pub(crate) fn cmdline_networking(
    ctx: &Context,
    links: &[(String, LinkStatus)],
) -> Result<Option<CmdlineNetworking>, ReconcileError> {
    let Some(cmdline) = ctx.get::<KernelCmdline>(runtime::NAMESPACE, KernelCmdline::ID)? else { return Ok(None) };
    Ok(crate::network::cmdline::parse(&Cmdline::parse(&cmdline.spec().cmdline), &link_resolver(links)).ok())
}

/// A network view with its device selectors resolved against the node's links, and the
/// names those links go by.
pub(crate) struct Resolved {
    pub view: NetworkView,
    pub devices: Vec<Device>,
    pub links: LinkResolver,
}

impl Resolved {
    pub(crate) fn new(view: NetworkView, links: &[(String, LinkStatus)]) -> Resolved {
        let devices = resolve_devices(&view.devices, links);
        Resolved { view, devices, links: link_resolver(links) }
    }
}

/// Writes `spec` as the candidate `<layer>/<id>` in `network-config`.
pub(crate) fn put<T: ResourceSpec>(
    ctx: &mut Context,
    layer: ConfigLayer,
    id: &str,
    spec: T,
) -> Result<(), ReconcileError> {
    ctx.apply(CONFIG_NAMESPACE, &layered_id(layer, id), spec)?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod testing {
    use crate::cosi::Harness;
    use crate::resources::config::{self as cfg, MachineConfig};
    use crate::resources::network::{HardwareAddress, LinkFlags, LinkStatus, LinkType, NAMESPACE};

    pub(crate) fn seed_config(h: &Harness, yaml: &str) {
        let mc = crate::controllers::config::machine_config::parse(yaml).unwrap();
        h.seed(cfg::NAMESPACE, MachineConfig::ACTIVE_ID, mc).unwrap();
    }

    pub(crate) fn remove_config(h: &Harness) {
        h.unseed::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID).unwrap();
    }

    /// A physical Ethernet link.
    pub(crate) fn seed_ether(h: &Harness, name: &str, mac: &str) {
        let status = LinkStatus {
            link_type: LinkType::ETHER,
            hardware_addr: mac.parse::<HardwareAddress>().unwrap(),
            permanent_addr: mac.parse::<HardwareAddress>().unwrap(),
            ..LinkStatus::default()
        };
        h.seed(NAMESPACE, name, status).unwrap();
    }

    pub(crate) fn seed_cmdline(h: &Harness, cmdline: &str) {
        let spec = crate::resources::runtime::KernelCmdline { cmdline: cmdline.into() };
        h.seed(crate::resources::runtime::NAMESPACE, crate::resources::runtime::KernelCmdline::ID, spec).unwrap();
    }

    pub(crate) fn seed_loopback(h: &Harness) {
        let status = LinkStatus { link_type: LinkType::LOOPBACK, flags: LinkFlags::LOOPBACK, ..LinkStatus::default() };
        h.seed(NAMESPACE, "lo", status).unwrap();
    }
}
