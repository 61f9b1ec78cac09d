//! `DeviceConfigController` (Talos's `network.DeviceConfigController`): one `DeviceConfigSpec`
//! per entry of v1alpha1 `machine.network.interfaces`, id `<interface>/<index, 3 digits>`,
//! holding the entry as written with its selectors resolved against the node's links — a
//! `deviceSelector` becomes the `interface` it picked, a bond's `deviceSelectors` its
//! `interfaces`. An entry whose selector picks no link has no spec (Talos logs and skips it).
//! Writes only `DeviceConfigSpec`; the address, link and route config controllers read the
//! same entries themselves.

use crate::config::{Path, Value};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::network::config::resolve_devices;
use crate::resources::config::{self as cfg, MachineConfig};
use crate::resources::network::{DeviceConfigSpec, LinkStatus, NAMESPACE};

use super::config_inputs::{link_statuses, machine_config_input, network_view};

pub struct DeviceConfigController;

/// A config value as JSON, mapping order kept.
fn json(value: &Value) -> serde_json::Value {
    match value {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => (*b).into(),
        Value::Int(i) => (*i).into(),
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, serde_json::Value::Number),
        Value::String(s) => s.clone().into(),
        Value::List(items) => items.iter().map(json).collect(),
        Value::Map(map) => map.iter().map(|(k, v)| (k.to_string(), json(v))).collect(),
    }
}

#[async_trait::async_trait]
impl Controller for DeviceConfigController {
    fn name(&self) -> String {
        "DeviceConfigController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![machine_config_input(), Input::weak::<LinkStatus>(NAMESPACE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive::<DeviceConfigSpec>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        ctx.start_tracking_outputs();
        if let Some(view) = network_view(ctx)?
            && let Some(mc) = ctx.get::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID)?
            && let Some(parsed) = mc.spec().parsed()
        {
            let written: Vec<serde_json::Value> = parsed
                .config
                .v1alpha1()
                .and_then(|d| d.value().at(&Path::keys("machine.network.interfaces")).and_then(Value::as_list))
                .map(|l| l.iter().map(json).collect())
                .unwrap_or_default();
            let links = link_statuses(ctx)?;
            for device in resolve_devices(&view.devices, &links) {
                let (Some(name), Some(entry)) = (&device.interface, written.get(device.index)) else { continue };
                let mut entry = entry.clone();
                if let Some(map) = entry.as_object_mut() {
                    map.remove("deviceSelector");
                    map.insert("interface".into(), name.clone().into());
                    if let (Some(bond), Some(resolved)) =
                        (map.get_mut("bond").and_then(|b| b.as_object_mut()), &device.bond)
                        && bond.remove("deviceSelectors").is_some()
                    {
                        bond.insert("interfaces".into(), resolved.interfaces.clone().into());
                    }
                }
                let id = format!("{name}/{:03}", device.index);
                ctx.apply(NAMESPACE, &id, DeviceConfigSpec { device: entry })?;
            }
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::config_inputs::testing::{remove_config, seed_config, seed_ether};
    use super::*;
    use crate::cosi::Harness;

    #[tokio::test]
    async fn one_spec_per_interface_entry_with_selectors_resolved() {
        let h = Harness::start(vec![Box::new(DeviceConfigController)]).unwrap();
        seed_config(
            &h,
            "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [192.168.1.2/24]\n        mtu: 1400\n\
             \x20     - deviceSelector: {hardwareAddr: '52:54:00:00:00:0b'}\n        dhcp: true\n\
             \x20     - interface: bond0\n        bond:\n          mode: active-backup\n          deviceSelectors:\n            - hardwareAddr: '52:54:00:00:01:*'\n",
        );
        let eth0 = h
            .assert_eventually::<DeviceConfigSpec, _>(NAMESPACE, "eth0/000", "the named device", |r| r.is_some())
            .await
            .unwrap();
        assert_eq!(eth0.spec().device["mtu"], 1400);
        assert_eq!(eth0.spec().device["addresses"][0], "192.168.1.2/24");
        // The selected link and the bond's members appear: their specs follow, resolved.
        seed_ether(&h, "enp0s11", "52:54:00:00:00:0b");
        seed_ether(&h, "enp1s0", "52:54:00:00:01:01");
        seed_ether(&h, "enp1s1", "52:54:00:00:01:02");
        let picked = h
            .assert_eventually::<DeviceConfigSpec, _>(NAMESPACE, "enp0s11/001", "selected", |r| r.is_some())
            .await
            .unwrap();
        assert_eq!(picked.spec().device["interface"], "enp0s11");
        assert!(picked.spec().device.get("deviceSelector").is_none(), "{:?}", picked.spec().device);
        let bond = h
            .assert_eventually::<DeviceConfigSpec, _>(NAMESPACE, "bond0/002", "the bond with its members", |r| {
                r.is_some_and(|r| r.spec().device["bond"]["interfaces"].as_array().is_some_and(|a| a.len() == 2))
            })
            .await
            .unwrap();
        assert_eq!(bond.spec().device["bond"]["interfaces"], serde_json::json!(["enp1s0", "enp1s1"]));
        assert!(bond.spec().device["bond"].get("deviceSelectors").is_none());
        // Config gone: no specs.
        remove_config(&h);
        h.assert_list::<DeviceConfigSpec, _>(NAMESPACE, "none", |l| l.is_empty()).await;
        h.stop().await;
    }
}
