//! Whether a loaded config makes sense for a talosbox node, as far as Talos's own validation
//! applies here: a known machine type, a join token, a CA that fits the role, decodable PEM,
//! sound SANs, hostname and endpoint, sound volume documents. Errors name the field; advice
//! comes back as warnings.
//! Checks only what the text says: the node's state (disks, links) is the API server's concern.

use super::ConfigError;
use super::document::Config;
use super::policy::inert_system_volume;
use super::typed::{Hostname, MachineType, MachineView};
use super::value::{Path, Value};

/// Checks a config meant to be applied to a node; returns its warnings.
pub fn validate(config: &Config) -> Result<Vec<String>, ConfigError> {
    let mut warnings = Vec::new();
    let Some(doc) = config.v1alpha1() else {
        return Err(ConfigError::Missing {
            doc: "v1alpha1".into(),
            reason: "a config to apply must contain the v1alpha1 document (machine.type, machine.ca, ...)".into(),
        });
    };
    let v1 = doc.value();
    let invalid = |path: &str, reason: &str| ConfigError::Invalid {
        doc: "v1alpha1".into(),
        path: path.into(),
        reason: reason.into(),
    };
    if v1.get("machine").is_none_or(Value::is_null) {
        return Err(invalid("machine", "machine instructions are required"));
    }
    if v1.get("persist") == Some(&Value::Bool(false)) {
        return Err(invalid("persist", "should be enabled"));
    }

    // Every value the node acts on must parse, in either place it may be written.
    let view: MachineView = config.machine()?;
    config.network()?;
    let block = config.block()?;
    config.install()?;
    for doc in config.by_kind("TrustedRootsConfig") {
        let certs = doc.value().get("certificates").and_then(Value::as_str).unwrap_or_default();
        crate::pki::pem::decode_certificates(certs, "PEM-encoded CA certificates").map_err(|e| {
            ConfigError::Invalid {
                doc: format!("TrustedRootsConfig {}", doc.name().unwrap_or_default()),
                path: "certificates".into(),
                reason: e.to_string(),
            }
        })?;
    }
    if let Some(hostname_doc) = config.find("HostnameConfig", None)
        && let Some(name) = hostname_doc.value().get("hostname").and_then(Value::as_str)
    {
        Hostname::try_from(name).map_err(|e| ConfigError::Invalid {
            doc: "HostnameConfig".into(),
            path: "hostname".into(),
            reason: e,
        })?;
    }

    let written_type = v1.at(&Path::keys("machine.type")).and_then(Value::as_str).unwrap_or_default();
    let Some(machine_type) = view.machine_type else {
        return Err(invalid("machine.type", "required (one of init, controlplane, worker)"));
    };
    if written_type != machine_type.as_str() {
        warnings.push(format!("use {:?} instead of {written_type:?} for machine type", machine_type.as_str()));
    }

    match &view.token {
        None if machine_type == MachineType::Worker => {
            return Err(invalid(
                "machine.token",
                "required on workers: trustd authenticates their certificate requests with it",
            ));
        }
        None => warnings.push("machine.token is not set: workers will not be able to join through this node".into()),
        Some(token) if !token.is_talos_shape() => {
            warnings.push("machine.token does not have the shape Talos generates ([a-z0-9]{6}.[a-z0-9]{16})".into())
        }
        Some(_) => {}
    }

    match (&view.ca, machine_type.is_control_plane()) {
        (None, true) => return Err(invalid("machine.ca", "the issuing CA is required on control-plane nodes")),
        (None, false) if view.accepted_cas.is_empty() => {
            return Err(invalid("machine.ca", "an issuing CA or some accepted CAs are required (machine.acceptedCAs)"));
        }
        (Some(ca), true) if ca.key.is_none() => {
            return Err(invalid("machine.ca.key", "the issuing CA key is required on control-plane nodes"));
        }
        (Some(ca), false) if ca.key.is_some() => {
            return Err(invalid("machine.ca.key", "the issuing CA key is not allowed on worker nodes"));
        }
        _ => {}
    }

    if v1.at(&Path::keys("machine.files")).and_then(Value::as_list).is_some_and(|f| !f.is_empty()) {
        warnings.push(".machine.files is deprecated; use dedicated configuration documents instead".into());
    }
    for volume in &block.volumes {
        if let Some(reason) = inert_system_volume(volume.name.as_str()) {
            warnings.push(format!("VolumeConfig {}: accepted and kept, not acted on ({reason})", volume.name.as_str()));
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load;

    const CRT: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=";
    const KEY: &str = "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0MKLS0tLS1FTkQgRUMgUFJJVkFURSBLRVktLS0tLQo=";

    fn check(text: &str) -> Result<Vec<String>, String> {
        let config = load(text).map_err(|e| format!("load: {e}"))?.config;
        validate(&config).map_err(|e| e.to_string())
    }

    fn machine(body: &str) -> String {
        format!("version: v1alpha1\nmachine:\n{body}")
    }

    #[test]
    fn talos_generated_configs_validate() {
        for (name, text) in crate::config::load::tests::TALOS_FIXTURES {
            let warnings = check(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(warnings.is_empty(), "{name}: {warnings:?}");
        }
    }

    #[test]
    fn accepted_with_warnings() {
        let worker = machine(&format!("  type: join\n  token: my-token\n  ca:\n    crt: {CRT}\n"));
        assert_eq!(
            check(&worker).unwrap(),
            [
                "use \"worker\" instead of \"join\" for machine type",
                "machine.token does not have the shape Talos generates ([a-z0-9]{6}.[a-z0-9]{16})",
            ]
        );
        let cp = machine(&format!("  type: controlplane\n  ca:\n    crt: {CRT}\n    key: {KEY}\n"));
        assert_eq!(
            check(&cp).unwrap(),
            ["machine.token is not set: workers will not be able to join through this node"]
        );
        let accepted_only =
            machine(&format!("  type: worker\n  token: abcdef.0123456789abcdef\n  acceptedCAs:\n    - crt: {CRT}\n"));
        assert_eq!(check(&accepted_only).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn volume_documents_are_validated_with_the_config() {
        let (_, base) = crate::config::load::tests::TALOS_FIXTURES
            .iter()
            .find(|(name, _)| *name == "v1.15/base-worker.yaml")
            .unwrap();
        let doc = |kind: &str, body: &str| format!("---\napiVersion: v1alpha1\nkind: {kind}\n{body}");
        let volumes = [
            doc("VolumeConfig", "name: STATE\nencryption:\n  provider: luks2\n  keys:\n    - slot: 0\n      tpm: {}\n"),
            doc("VolumeConfig", "name: IMAGECACHE\n"),
            doc("VolumeConfig", "name: ETCD\nprovisioning:\n  maxSize: 10GiB\n"),
            doc("UserVolumeConfig", "name: data\nprovisioning:\n  diskSelector:\n    match: '!system_disk'\n  minSize: 10GiB\n  maxSize: 90%\n"),
            doc("RawVolumeConfig", "name: raw\nprovisioning:\n  diskSelector:\n    match: 'true'\n  maxSize: -1GiB\n"),
            doc("ExistingVolumeConfig", "name: old\ndiscovery:\n  volumeSelector:\n    match: volume.label == \"old\"\n"),
            doc("SwapVolumeConfig", "name: swap\nprovisioning:\n  diskSelector:\n    match: system_disk\n  maxSize: 2GiB\n"),
        ]
        .concat();
        // The fixture's own `VolumeConfig EPHEMERAL` stays; STATE, IMAGECACHE and ETCD join it.
        let text = format!("{base}{volumes}");
        assert_eq!(
            check(&text).unwrap(),
            [
                "VolumeConfig IMAGECACHE: accepted and kept, not acted on (containers are out of scope)",
                "VolumeConfig ETCD: accepted and kept, not acted on (Kubernetes and etcd are out of scope)",
            ]
        );
        let bad = format!("{base}{}", doc("UserVolumeConfig", "name: data\nvolumeType: disk\n"));
        assert_eq!(
            check(&bad).unwrap_err(),
            "UserVolumeConfig data: provisioning.diskSelector.match: disk selector is required"
        );
    }

    #[test]
    fn refused() {
        let token = "  token: abcdef.0123456789abcdef\n";
        let cases: Vec<(String, &str)> = vec![
            (
                "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: a\n".into(),
                "v1alpha1: a config to apply must contain the v1alpha1 document (machine.type, machine.ca, ...)",
            ),
            ("version: v1alpha1\ndebug: true\n".into(), "v1alpha1: machine: machine instructions are required"),
            (
                "version: v1alpha1\npersist: false\nmachine: {type: worker}\n".into(),
                "v1alpha1: persist: should be enabled",
            ),
            (
                machine("  token: abcdef.0123456789abcdef\n"),
                "v1alpha1: machine.type: required (one of init, controlplane, worker)",
            ),
            (
                machine("  type: boss\n"),
                "v1alpha1: machine.type: unknown machine type \"boss\" (one of init, controlplane, worker)",
            ),
            (
                machine(&format!("  type: worker\n  ca:\n    crt: {CRT}\n")),
                "v1alpha1: machine.token: required on workers: trustd authenticates their certificate requests with it",
            ),
            (
                machine(&format!("  type: worker\n  token: 'a b'\n  ca:\n    crt: {CRT}\n")),
                "v1alpha1: machine.token: must be printable ASCII without spaces",
            ),
            (
                machine(&format!("  type: controlplane\n{token}")),
                "v1alpha1: machine.ca: the issuing CA is required on control-plane nodes",
            ),
            (
                machine(&format!("  type: init\n{token}  ca:\n    crt: {CRT}\n")),
                "v1alpha1: machine.ca.key: the issuing CA key is required on control-plane nodes",
            ),
            (
                machine(&format!("  type: worker\n{token}")),
                "v1alpha1: machine.ca: an issuing CA or some accepted CAs are required (machine.acceptedCAs)",
            ),
            (
                machine(&format!("  type: worker\n{token}  ca:\n    crt: {CRT}\n    key: {KEY}\n")),
                "v1alpha1: machine.ca.key: the issuing CA key is not allowed on worker nodes",
            ),
            (
                machine(&format!("  type: worker\n{token}  ca:\n    crt: {KEY}\n")),
                "v1alpha1: machine.ca.crt: expected a CERTIFICATE, got EC PRIVATE KEY",
            ),
            (
                machine(&format!("  type: controlplane\n{token}  ca:\n    crt: {CRT}\n    key: {CRT}\n")),
                "v1alpha1: machine.ca.key: expected a private key, got CERTIFICATE",
            ),
            (
                machine(&format!("  type: worker\n{token}  acceptedCAs:\n    - crt: '%%'\n")),
                "v1alpha1: machine.acceptedCAs[0].crt: not base64: Invalid symbol 37, offset 0.",
            ),
            (
                machine(&format!("  type: worker\n{token}  certSANs: ['a b']\n  ca:\n    crt: {CRT}\n")),
                "v1alpha1: machine.certSANs[0]: \"a b\" is neither an IP address nor a DNS name",
            ),
            (
                machine("  type: worker\n  network:\n    hostname: a_b\n"),
                "v1alpha1: machine.network.hostname: \"a_b\" is not a valid hostname (labels of letters, digits and inner '-', up to 63 characters each)",
            ),
            (
                format!("{}cluster:\n  controlPlane:\n    endpoint: tcp://x\n", machine("  type: worker\n")),
                "v1alpha1: cluster.controlPlane.endpoint: \"tcp://x\" is not an http(s) URL: no http:// or https://",
            ),
            (
                format!(
                    "{}---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: -x\n",
                    machine("  type: worker\n")
                ),
                "HostnameConfig: hostname: \"-x\" is not a valid hostname (labels of letters, digits and inner '-', up to 63 characters each)",
            ),
            (
                format!(
                    "{}---\napiVersion: v1alpha1\nkind: TrustedRootsConfig\nname: lab\ncertificates: not a certificate\n",
                    machine("  type: worker\n")
                ),
                "TrustedRootsConfig lab: certificates: reading PEM-encoded CA certificates: no certificate found",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(check(&text).unwrap_err(), want, "{text}");
        }
    }
}
