//! `TrustedRootsController`: the bundle of CAs a node trusts for https, rendered as Talos
//! renders it: the image's own roots ([`IMAGE_TRUSTED_ROOTS`], the build host's bundle),
//! then the certificates of each `TrustedRootsConfig` document, under a comment naming it.
//! It becomes the `EtcFileSpec` [`TRUSTED_ROOTS_FILE`]; the rootfs's
//! `/etc/ssl/certs/ca-certificates.crt` points at the written copy, so what fetches an image
//! over https, or reaches a KMS over TLS, trusts what the configuration adds.
//!
//! A `TrustedRootsConfig` change is live: the file is rendered again, nothing reboots.

use std::path::{Path, PathBuf};

use crate::config::{Config, Value};
use crate::cosi::{Context, Controller, Input, Output, ReconcileError};
use crate::resources::config::{self as cfg, MachineConfig};
use crate::resources::files::{self, EtcFileSpec};

pub use crate::boot::IMAGE_TRUSTED_ROOTS;
pub use crate::resources::files::TRUSTED_ROOTS_FILE;

/// Each `TrustedRootsConfig` document's name and certificates, in the configuration's order.
pub fn custom_roots(config: &Config) -> Vec<(String, String)> {
    config
        .by_kind("TrustedRootsConfig")
        .map(|doc| {
            let certs = doc.value().get("certificates").and_then(Value::as_str).unwrap_or_default();
            (doc.name().unwrap_or_default().to_string(), certs.to_string())
        })
        .collect()
}

/// The bundle: the image's roots, then each document's certificates under `# <name>`.
pub fn render(image_roots: &str, custom: &[(String, String)]) -> String {
    let mut out = image_roots.to_string();
    for (name, certs) in custom {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!("\n# TrustedRootsConfig {name}\n{}", certs.trim()));
        out.push('\n');
    }
    out
}

/// The bundle for `config` with the roots read from `image_roots` (none when it is absent).
pub fn bundle_for(image_roots: &Path, config: Option<&Config>) -> String {
    let image = std::fs::read_to_string(image_roots).unwrap_or_default();
    render(&image, &config.map(custom_roots).unwrap_or_default())
}

pub struct TrustedRootsController {
    image_roots: PathBuf,
}

impl TrustedRootsController {
    pub fn new(image_roots: impl Into<PathBuf>) -> Self {
        Self { image_roots: image_roots.into() }
    }
}

#[async_trait::async_trait]
impl Controller for TrustedRootsController {
    fn name(&self) -> String {
        "TrustedRootsController".to_string()
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<MachineConfig>(cfg::NAMESPACE).with_id(MachineConfig::ACTIVE_ID)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared::<EtcFileSpec>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let mc = ctx.get::<MachineConfig>(cfg::NAMESPACE, MachineConfig::ACTIVE_ID)?.filter(|mc| mc.is_running());
        let config = mc.as_ref().and_then(|mc| mc.spec().parsed()).map(|p| &p.config);
        let contents = bundle_for(&self.image_roots, config);
        ctx.start_tracking_outputs();
        if !contents.is_empty() {
            let spec = EtcFileSpec { contents, mode: 0o644, selinux_label: String::new() };
            ctx.apply(files::NAMESPACE, TRUSTED_ROOTS_FILE, spec)?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMAGE: &str = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";

    fn config(extra: &str) -> Config {
        let text = format!("version: v1alpha1\nmachine:\n  type: worker\n{extra}");
        crate::config::load(&text).unwrap().config
    }

    #[test]
    fn the_image_roots_come_first_then_each_document() {
        let c = config(
            "---\napiVersion: v1alpha1\nkind: TrustedRootsConfig\nname: lab\ncertificates: |\n  -----BEGIN CERTIFICATE-----\n  BBBB\n  -----END CERTIFICATE-----\n\
             ---\napiVersion: v1alpha1\nkind: TrustedRootsConfig\nname: corp\ncertificates: \"-----BEGIN CERTIFICATE-----\\nCCCC\\n-----END CERTIFICATE-----\"\n",
        );
        assert_eq!(
            custom_roots(&c).iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["lab", "corp"],
            "in the configuration's order"
        );
        let text = render(IMAGE, &custom_roots(&c));
        assert_eq!(
            text,
            format!(
                "{IMAGE}\n# TrustedRootsConfig lab\n-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n\
                 \n# TrustedRootsConfig corp\n-----BEGIN CERTIFICATE-----\nCCCC\n-----END CERTIFICATE-----\n"
            )
        );
        // No documents: the image's roots as they are; no image roots: the documents alone.
        assert_eq!(render(IMAGE, &[]), IMAGE);
        assert!(render("", &custom_roots(&c)).starts_with("\n# TrustedRootsConfig lab\n"));
    }

    #[test]
    fn a_missing_image_bundle_leaves_the_documents() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(bundle_for(&tmp.path().join("absent"), None), "");
        let path = tmp.path().join("roots.pem");
        std::fs::write(&path, IMAGE).unwrap();
        assert_eq!(bundle_for(&path, None), IMAGE);
    }
}
