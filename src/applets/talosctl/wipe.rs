//! `talosctl wipe disk <device>...`: wipe block devices (disks or partitions, named as the
//! kernel names them: `vdb`, `sda5`) that no volume uses, without a reboot. The node checks
//! every device before it wipes any. `--method` is Talos's enum name (`FAST`, `ZEROES`; any
//! case); nothing is printed on success, as in Talos.

use std::process::ExitCode;

use super::Cli;
use super::node::{per_node, st};
use crate::proto::storage::{self as s, block_device_wipe_descriptor::Method};

#[derive(Debug, clap::Subcommand)]
pub enum WipeCommand {
    /// Wipe a block device (disk or partition) which is not used as a volume.
    Disk(DiskArgs),
}

#[derive(Debug, clap::Args)]
pub struct DiskArgs {
    /// Device names, without /dev/: vda, sda5.
    #[arg(required = true)]
    devices: Vec<String>,
    /// The wipe method: FAST (signatures: the first and last MiB) or ZEROES (every byte).
    #[arg(long, default_value = "FAST", value_parser = parse_method)]
    method: Method,
    /// Remove the partition from its disk's table after the wipe (partitions only).
    #[arg(long)]
    drop_partition: bool,
    /// Skip the check that no volume uses the device.
    #[arg(long, hide = true)]
    skip_volume_check: bool,
    /// Skip the check that no device is built on it (RAID, LVM); use with caution.
    #[arg(long, hide = true)]
    skip_secondary_check: bool,
}

/// A method by its protobuf name, in any case.
fn parse_method(text: &str) -> Result<Method, String> {
    Method::from_str_name(&text.to_ascii_uppercase())
        .ok_or_else(|| format!("invalid wipe method {text:?}: FAST or ZEROES"))
}

impl DiskArgs {
    fn request(&self) -> s::BlockDeviceWipeRequest {
        s::BlockDeviceWipeRequest {
            devices: self
                .devices
                .iter()
                .map(|device| s::BlockDeviceWipeDescriptor {
                    device: device.clone(),
                    method: self.method as i32,
                    skip_volume_check: self.skip_volume_check,
                    skip_secondary_check: self.skip_secondary_check,
                    drop_partition: self.drop_partition,
                })
                .collect(),
        }
    }
}

pub fn run(cli: &Cli, command: WipeCommand) -> ExitCode {
    match command {
        WipeCommand::Disk(args) => {
            let request = args.request();
            per_node(cli, "wipe disk", |session, target| {
                let request = request.clone();
                async move {
                    session.storage().block_device_wipe(session.request(&target, request)).await.map_err(st)?;
                    Ok(())
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(subcommand)]
        command: WipeCommand,
    }

    fn parse(args: &[&str]) -> Result<DiskArgs, clap::Error> {
        let wrap = Wrap::try_parse_from(std::iter::once("wipe").chain(args.iter().copied()))?;
        let WipeCommand::Disk(args) = wrap.command;
        Ok(args)
    }

    #[test]
    fn flags_make_talos_descriptors() {
        let plain = parse(&["disk", "vdb"]).unwrap().request();
        assert_eq!(plain.devices, [s::BlockDeviceWipeDescriptor { device: "vdb".into(), ..Default::default() }]);

        let all = parse(&[
            "disk",
            "vdb1",
            "vdb2",
            "--method",
            "zeroes",
            "--drop-partition",
            "--skip-volume-check",
            "--skip-secondary-check",
        ])
        .unwrap()
        .request();
        assert_eq!(all.devices.len(), 2);
        for (d, name) in all.devices.iter().zip(["vdb1", "vdb2"]) {
            assert_eq!(d.device, name);
            assert_eq!(d.method, Method::Zeroes as i32);
            assert!(d.drop_partition && d.skip_volume_check && d.skip_secondary_check);
        }
        assert_eq!(parse(&["disk", "vdb", "--method", "FAST"]).unwrap().method, Method::Fast);
    }

    #[test]
    fn a_device_is_required_and_methods_are_talos_names() {
        assert!(parse(&["disk"]).is_err());
        let e = parse(&["disk", "vdb", "--method", "shred"]).unwrap_err().to_string();
        assert!(e.contains("invalid wipe method \"shred\""), "{e}");
    }
}
