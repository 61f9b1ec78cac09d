//! Declarative wipes that run once (`DiskWipeConfig`; beyond Talos, whose users have asked for
//! it since 2020, #2213): every disk a wipe's selector matches is wiped — its partition table
//! and signatures, the fast method — and then remembered in META, so no later boot, re-apply
//! or reconcile wipes it again. The volume manager runs them, before it provisions anything
//! in a pass: it is the node's one writer of disks, so a wipe never races a partition being
//! made. A disk is remembered by its WWID, or its serial when it has none; a disk with neither
//! could not be told from another next boot and is refused. The system disk, a read-only disk
//! or CD-ROM, and a disk any volume is on are refused too, with the reason in `DiskWipeStatus`.
//!
//! A wipe waits until discovery has probed every disk, and a disk where a volume not located
//! yet would be found (its locator matches a partition there, or a disk volume selects it)
//! counts as holding that volume. The record is written after the wipe, so a wipe is never
//! recorded without having happened; a power cut between the two runs the wipe once more at
//! the next boot, on a disk nothing has used since.
//!
//! The record is META tag [`DISK_WIPE_TAG`] (outside Talos's tags): one line per wipe done,
//! `<wipe name> <identity>`. Deleting the key (`talosctl meta delete 0x80`) or renaming the
//! document makes the wipe run again.

use std::collections::BTreeSet;

use crate::resources::block::{Disk, DiskWipeOutcome, VolumePhase, VolumeStatus};

/// The META tag of the wipes done.
pub const DISK_WIPE_TAG: u8 = 0x80;

/// What a disk is known by across boots: `wwid:<WWID>`, else `serial:<serial>`, else `None`.
pub fn identity(disk: &Disk) -> Option<String> {
    if !disk.wwid.trim().is_empty() {
        Some(format!("wwid:{}", disk.wwid.trim()))
    } else if !disk.serial.trim().is_empty() {
        Some(format!("serial:{}", disk.serial.trim()))
    } else {
        None
    }
}

/// The wipes done, as META keeps them: (wipe name, identity).
pub fn parse_records(value: &[u8]) -> BTreeSet<(String, String)> {
    String::from_utf8_lossy(value)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(name, id)| (name.to_string(), id.to_string()))
        .collect()
}

/// The records with one more, as META keeps them.
pub fn with_record(value: Option<&[u8]>, name: &str, identity: &str) -> Vec<u8> {
    let mut records = value.map(parse_records).unwrap_or_default();
    records.insert((name.to_string(), identity.to_string()));
    records.iter().map(|(n, i)| format!("{n} {i}\n")).collect::<String>().into_bytes()
}

/// What to do with one disk a wipe's selector matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Wipe { identity: String },
    Done(DiskWipeOutcome),
}

/// Whether `location` is the disk at `dev_path` or one of its partitions.
fn on_disk(location: &str, dev_path: &str) -> bool {
    location == dev_path
        || location.strip_prefix(dev_path).is_some_and(|rest| {
            let rest =
                rest.strip_prefix('p').filter(|_| dev_path.ends_with(|c: char| c.is_ascii_digit())).unwrap_or(rest);
            !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())
        })
}

/// The decision for wipe `name` on `disk` (at `dev_path`), given whether it is the system disk,
/// the volumes the node has and the records in META. Pure: the table of tests below.
pub fn decide(
    name: &str,
    disk: &Disk,
    system_disk: bool,
    volumes: &[(String, VolumeStatus)],
    records: &BTreeSet<(String, String)>,
) -> Decision {
    let done = |identity: &str, outcome: String| {
        Decision::Done(DiskWipeOutcome { dev_path: disk.dev_path.clone(), identity: identity.to_string(), outcome })
    };
    let Some(identity) = identity(disk) else {
        return done("", "not wiped: the disk has no WWID or serial to remember the wipe by".into());
    };
    if records.contains(&(name.to_string(), identity.clone())) {
        return done(&identity, "wiped before".into());
    }
    if system_disk {
        return done(&identity, "not wiped: it is the system disk".into());
    }
    if disk.readonly || disk.cdrom {
        return done(&identity, "not wiped: the disk is read-only".into());
    }
    let on_it: Vec<&str> = volumes
        .iter()
        .filter(|(_, v)| !matches!(v.phase, VolumePhase::Waiting | VolumePhase::Missing))
        .filter(|(_, v)| on_disk(&v.location, &disk.dev_path) || on_disk(&v.parent_location, &disk.dev_path))
        .map(|(id, _)| id.as_str())
        .collect();
    if !on_it.is_empty() {
        return done(&identity, format!("not wiped: volume {} is on it", on_it.join(", ")));
    }
    Decision::Wipe { identity }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(dev: &str, wwid: &str, serial: &str) -> Disk {
        Disk { dev_path: dev.into(), wwid: wwid.into(), serial: serial.into(), ..Disk::default() }
    }

    fn vol(location: &str, parent: &str, phase: VolumePhase) -> VolumeStatus {
        VolumeStatus { location: location.into(), parent_location: parent.into(), phase, ..VolumeStatus::default() }
    }

    #[test]
    fn a_disk_is_known_by_its_wwid_then_its_serial() {
        assert_eq!(identity(&disk("/dev/vdb", "naa.5000", "S1")).as_deref(), Some("wwid:naa.5000"));
        assert_eq!(identity(&disk("/dev/vdb", "", "talosbox-extra-1")).as_deref(), Some("serial:talosbox-extra-1"));
        assert_eq!(identity(&disk("/dev/vdb", " ", "")), None);
    }

    #[test]
    fn records_read_back_and_grow_without_repeats() {
        let one = with_record(None, "scratch", "serial:A");
        assert_eq!(one, b"scratch serial:A\n");
        let two = with_record(Some(&one), "old", "wwid:B");
        let again = with_record(Some(&two), "scratch", "serial:A");
        assert_eq!(two, again);
        let records = parse_records(&two);
        assert!(records.contains(&("old".into(), "wwid:B".into())) && records.len() == 2);
        assert!(parse_records(b"garbage\n\xff\n").is_empty());
    }

    #[test]
    fn decisions() {
        let d = disk("/dev/vdb", "", "X");
        let records: BTreeSet<(String, String)> = [("scratch".to_string(), "serial:X".to_string())].into();
        let none = BTreeSet::new();
        let outcome = |dec: Decision| match dec {
            Decision::Done(o) => o.outcome,
            Decision::Wipe { identity } => format!("wipe {identity}"),
        };
        let cases: Vec<(&str, Decision, &str)> = vec![
            ("a new disk", decide("scratch", &d, false, &[], &none), "wipe serial:X"),
            ("recorded", decide("scratch", &d, false, &[], &records), "wiped before"),
            ("another wipe's record", decide("other", &d, false, &[], &records), "wipe serial:X"),
            ("the system disk", decide("scratch", &d, true, &[], &none), "not wiped: it is the system disk"),
            (
                "no identity",
                decide("scratch", &disk("/dev/vdb", "", ""), false, &[], &none),
                "not wiped: the disk has no WWID or serial to remember the wipe by",
            ),
            (
                "read-only",
                decide("scratch", &Disk { readonly: true, ..d.clone() }, false, &[], &none),
                "not wiped: the disk is read-only",
            ),
            (
                "a volume on a partition",
                decide(
                    "scratch",
                    &d,
                    false,
                    &[("u-data".into(), vol("/dev/vdb1", "/dev/vdb", VolumePhase::Ready))],
                    &none,
                ),
                "not wiped: volume u-data is on it",
            ),
            (
                "a volume on the whole disk",
                decide("scratch", &d, false, &[("r-raw".into(), vol("/dev/vdb", "", VolumePhase::Located))], &none),
                "not wiped: volume r-raw is on it",
            ),
            (
                "a volume elsewhere, or only waiting",
                decide(
                    "scratch",
                    &d,
                    false,
                    &[
                        ("u-a".into(), vol("/dev/vdba1", "/dev/vdba", VolumePhase::Ready)),
                        ("u-b".into(), vol("/dev/vdc1", "/dev/vdc", VolumePhase::Ready)),
                        ("u-c".into(), vol("/dev/vdb1", "/dev/vdb", VolumePhase::Waiting)),
                    ],
                    &none,
                ),
                "wipe serial:X",
            ),
        ];
        for (what, got, want) in cases {
            assert_eq!(outcome(got), want, "{what}");
        }
        let nvme = disk("/dev/nvme0n1", "eui.1", "");
        let on = [("u-n".to_string(), vol("/dev/nvme0n1p3", "/dev/nvme0n1", VolumePhase::Ready))];
        assert!(matches!(decide("w", &nvme, false, &on, &none), Decision::Done(_)));
    }
}
