//! Where a node installs itself: v1alpha1's `machine.install` (`disk`, `diskSelector`, `image`,
//! `wipe`, `extraKernelArgs`) or the `UnattendedInstallConfig` document (`installer.image`,
//! `provisioning.diskSelector.match`, `provisioning.wipe`). Every way of naming the disk ends
//! as one CEL expression over the Disk: a path becomes `disk.dev_path` (or one of its by-id
//! names), Talos's selector fields are translated as Talos translates them, and — beyond
//! Talos, which users ask for (#11255) — `machine.install.diskSelector.match` is CEL itself.
//! Checked and compiled when the configuration is applied.

use super::ConfigError;
use super::document::Config;
use super::value::{Path, Value};

/// The install the configuration asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallView {
    /// CEL over the Disk (`disk`, `system_disk`, `glob()`, units).
    pub selector: String,
    /// Where in the configuration the disk was named, for messages.
    pub named_by: String,
    /// `machine.install.image` / `installer.image`: an http(s) URL of an imager output
    /// directory to install from; anything else (a container image reference) means the
    /// artifacts the node booted from.
    pub image: Option<String>,
    pub wipe: bool,
    pub extra_kernel_args: Vec<String>,
}

impl InstallView {
    /// The image when it is a URL the node fetches.
    pub fn image_url(&self) -> Option<&str> {
        self.image.as_deref().filter(|i| i.starts_with("http://") || i.starts_with("https://"))
    }
}

fn invalid(doc: &str, path: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { doc: doc.into(), path: path.into(), reason: reason.into() }
}

fn cel_string(s: &str) -> String {
    format!("{s:?}")
}

/// Talos's `InstallDiskSelector` as the CEL expression Talos builds from it (`DiskMatchExpression`):
/// each field given becomes a clause, a transport is required (so no device-mapper device
/// matches), and the disk must be writable and not a CD-ROM.
pub fn talos_selector(sel: &Value) -> Result<String, (String, String)> {
    let field = |name: &str| sel.get(name).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let bad = |name: &str, why: String| (format!("machine.install.diskSelector.{name}"), why);
    let mut clauses = Vec::new();
    if let Some(size) = field("size") {
        let (op, rest) = [">=", "<=", "==", ">", "<"]
            .iter()
            .find_map(|op| size.strip_prefix(op).map(|r| (*op, r)))
            .unwrap_or(("==", size));
        let bytes = super::block::ByteSize::try_from(rest.trim()).map_err(|e| bad("size", e))?;
        if bytes.negative {
            return Err(bad("size", format!("{size:?}: a disk size is not negative")));
        }
        clauses.push(format!("disk.size {op} {}u", bytes.bytes));
    }
    for (name, cel) in [("uuid", "uuid"), ("wwid", "wwid"), ("model", "model")] {
        if let Some(v) = field(name) {
            clauses.push(format!("glob({}, disk.{cel})", cel_string(v)));
        }
    }
    if field("name").is_some() {
        return Err(bad("name", "a selector on name is not supported (as in Talos); use busPath or match".into()));
    }
    for (name, cel) in [("serial", "serial"), ("modalias", "modalias")] {
        if let Some(v) = field(name) {
            clauses.push(format!("glob({}, disk.{cel})", cel_string(v)));
        }
    }
    clauses.push("disk.transport != \"\"".into());
    match field("type") {
        None => {}
        Some("nvme") => clauses.push("disk.transport == \"nvme\"".into()),
        Some("sd") => clauses.push("disk.transport == \"mmc\"".into()),
        Some("hdd") => clauses.push("disk.rotational".into()),
        Some("ssd") => clauses.push("!disk.rotational".into()),
        Some(other) => return Err(bad("type", format!("{other:?} is not one of ssd, hdd, nvme, sd"))),
    }
    if let Some(v) = field("busPath") {
        clauses.push(format!("glob({}, disk.bus_path)", cel_string(v)));
    }
    clauses.push("!disk.readonly".into());
    clauses.push("!disk.cdrom".into());
    Ok(clauses.join(" && "))
}

impl Config {
    /// The install the configuration asks for, if any. Both documents naming a disk is an
    /// error, as is a v1alpha1 `disk` beside a `diskSelector`.
    pub fn install(&self) -> Result<Option<InstallView>, ConfigError> {
        let v1 = self.v1alpha1().and_then(|d| d.value().get("machine")).and_then(|m| m.get("install"));
        let str_at = |v: &Value, dotted: &str| v.at(&Path::keys(dotted)).and_then(Value::as_str).map(str::to_string);
        let mut found: Option<InstallView> = None;
        if let Some(install) = v1 {
            let disk = str_at(install, "disk").filter(|d| !d.trim().is_empty());
            let selector = install.get("diskSelector").filter(|s| !s.is_null());
            let expr = match (disk, selector) {
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        "v1alpha1",
                        "machine.install.diskSelector",
                        "name the install disk once: disk or diskSelector, not both",
                    ));
                }
                (Some(disk), None) => {
                    let d = cel_string(&disk);
                    Some((format!("disk.dev_path == {d} || {d} in disk.symlinks"), "machine.install.disk".to_string()))
                }
                (None, Some(sel)) => {
                    let others = ["size", "name", "model", "serial", "modalias", "uuid", "wwid", "type", "busPath"];
                    let cel = sel.get("match").and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
                    let talos = others.iter().any(|f| sel.get(f).is_some_and(|v| !v.is_null()));
                    match (cel, talos) {
                        (Some(_), true) => {
                            return Err(invalid(
                                "v1alpha1",
                                "machine.install.diskSelector.match",
                                "a CEL match stands alone: drop the other selector fields",
                            ));
                        }
                        (Some(cel), false) => Some((cel.to_string(), "machine.install.diskSelector.match".to_string())),
                        (None, _) => Some((
                            talos_selector(sel).map_err(|(path, why)| invalid("v1alpha1", &path, why))?,
                            "machine.install.diskSelector".to_string(),
                        )),
                    }
                }
                (None, None) => None,
            };
            if let Some((selector, named_by)) = expr {
                let args = install
                    .get("extraKernelArgs")
                    .and_then(Value::as_list)
                    .map(|l| l.iter().filter_map(Value::as_str).map(str::to_string).collect())
                    .unwrap_or_default();
                found = Some(InstallView {
                    selector,
                    named_by,
                    image: str_at(install, "image").filter(|s| !s.is_empty()),
                    // Talos's default for wipe is false when unset.
                    wipe: install.get("wipe").and_then(Value::as_bool).unwrap_or(false),
                    extra_kernel_args: args,
                });
            }
        }
        if let Some(doc) = self.find("UnattendedInstallConfig", None) {
            let v = doc.value();
            if let Some(selector) = str_at(v, "provisioning.diskSelector.match").filter(|s| !s.trim().is_empty()) {
                if found.is_some() {
                    return Err(invalid(
                        "UnattendedInstallConfig",
                        "provisioning.diskSelector.match",
                        "the install disk is named in machine.install already",
                    ));
                }
                found = Some(InstallView {
                    selector,
                    named_by: "UnattendedInstallConfig provisioning.diskSelector.match".into(),
                    image: str_at(v, "installer.image").filter(|s| !s.is_empty()),
                    wipe: v.at(&Path::keys("provisioning.wipe")).and_then(Value::as_bool).unwrap_or(false),
                    extra_kernel_args: Vec::new(),
                });
            }
        }
        if let Some(view) = &found {
            crate::block::selector::Expression::compile(&view.selector, crate::block::selector::Env::DiskLocator)
                .map_err(|e| invalid("v1alpha1", &view.named_by, format!("{:?}: {e}", view.selector)))?;
            if let Some(image) = view.image.as_deref()
                && (image.starts_with("http://") || image.starts_with("https://"))
                && image.parse::<http::Uri>().is_err()
            {
                return Err(invalid("v1alpha1", "machine.install.image", format!("{image:?} is not a URL")));
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::load;

    fn view(extra: &str) -> Result<Option<super::InstallView>, String> {
        let text = format!("version: v1alpha1\nmachine:\n  type: worker\n{extra}");
        load(&text).map_err(|e| e.to_string())?.config.install().map_err(|e| e.to_string())
    }

    #[test]
    fn a_disk_path_a_talos_selector_and_a_cel_match() {
        assert_eq!(view("").unwrap(), None);
        let v = view("  install:\n    disk: /dev/vda\n    wipe: true\n    extraKernelArgs: [a=1]\n").unwrap().unwrap();
        assert_eq!(v.selector, "disk.dev_path == \"/dev/vda\" || \"/dev/vda\" in disk.symlinks");
        assert!(v.wipe && v.extra_kernel_args == ["a=1"]);
        let v = view("  install:\n    diskSelector:\n      size: '<= 256KiB'\n").unwrap().unwrap();
        assert_eq!(v.selector, "disk.size <= 262144u && disk.transport != \"\" && !disk.readonly && !disk.cdrom");
        let v =
            view("  install:\n    diskSelector:\n      size: 1MiB\n      type: hdd\n      modalias: pci:1234:5678*\n")
                .unwrap()
                .unwrap();
        assert_eq!(
            v.selector,
            "disk.size == 1048576u && glob(\"pci:1234:5678*\", disk.modalias) && disk.transport != \"\" && disk.rotational && !disk.readonly && !disk.cdrom"
        );
        let v = view("  install:\n    diskSelector:\n      match: disk.serial == 'talosbox-system'\n    image: http://10.0.2.100/images/boot/\n")
            .unwrap()
            .unwrap();
        assert_eq!(v.selector, "disk.serial == 'talosbox-system'");
        assert_eq!(v.image_url(), Some("http://10.0.2.100/images/boot/"));
        let v =
            view("  install:\n    disk: /dev/sda\n    image: ghcr.io/siderolabs/installer:v1.9.0\n").unwrap().unwrap();
        assert_eq!(v.image_url(), None, "a container image means the artifacts the node booted from");
    }

    #[test]
    fn mistakes_name_their_field() {
        for (extra, want) in [
            ("  install:\n    disk: /dev/vda\n    diskSelector:\n      size: 1GB\n", "machine.install.diskSelector"),
            ("  install:\n    diskSelector:\n      match: 'disk.size >'\n", "machine.install.diskSelector.match"),
            ("  install:\n    diskSelector:\n      match: 'true'\n      serial: x\n", "a CEL match stands alone"),
            ("  install:\n    diskSelector:\n      size: 12 parsecs\n", "machine.install.diskSelector.size"),
            ("  install:\n    diskSelector:\n      name: sda\n", "not supported"),
        ] {
            let err = view(extra).unwrap_err();
            assert!(err.contains(want), "{extra}: {err}");
        }
    }

    #[test]
    fn unattended_install_config_names_a_disk_by_cel() {
        let text = "version: v1alpha1\nmachine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: UnattendedInstallConfig\ninstaller:\n  image: https://example.com/talosbox/\nprovisioning:\n  diskSelector:\n    match: disk.dev_path == \"/dev/vda\"\n  wipe: true\n";
        let v = load(text).unwrap().config.install().unwrap().unwrap();
        assert_eq!(v.selector, "disk.dev_path == \"/dev/vda\"");
        assert!(v.wipe);
        assert_eq!(v.image_url(), Some("https://example.com/talosbox/"));
    }
}
