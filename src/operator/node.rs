//! Talking to a machine's node: the [`NodeClient`] trait the engine calls (Version, dry-run
//! and real ApplyConfiguration, the insecure maintenance apply, Upgrade, health, Reset), and
//! [`GrpcNodes`], its implementation over the Talos API with mutual TLS.
//!
//! Works against Talos nodes as well as talosbox's: the diff of a dry run is read from
//! talosbox's structured `diff_json` when the node sends it, otherwise from the text after
//! the last "Config diff:" of `mode_details` ("No changes." being no diff), as Talos sends it.
//! A node error is only ever an error here; deciding it is not drift is the caller's part.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tonic::transport::Channel;

use super::render::NodeCredentials;
use crate::client::api::APID_PORT;
use crate::client::health;
use crate::proto::machine::{self as m, apply_configuration_request::Mode};

#[derive(Debug, Clone, thiserror::Error)]
pub enum NodeError {
    #[error("{endpoint}: connecting: {detail}")]
    Connect { endpoint: String, detail: String },
    #[error("{endpoint}: {call}: {detail}")]
    Call { endpoint: String, call: &'static str, detail: String },
    #[error("{endpoint}: {call}: no answer within {timeout:?}")]
    Timeout { endpoint: String, call: &'static str, timeout: Duration },
}

/// Where a call goes and with what credentials.
#[derive(Debug, Clone)]
pub struct NodeTarget {
    pub endpoint: String,
    pub credentials: NodeCredentials,
}

#[async_trait]
pub trait NodeClient: Send + Sync + 'static {
    /// The version tag the node reports (`v1.9.0`).
    async fn version(&self, t: &NodeTarget) -> Result<String, NodeError>;
    /// A dry-run apply of `config`: the node's diff against its running config, empty when
    /// there is none.
    async fn dry_run(&self, t: &NodeTarget, config: &str) -> Result<String, NodeError>;
    /// Applies `config` (mode auto).
    async fn apply(&self, t: &NodeTarget, config: &str) -> Result<(), NodeError>;
    /// Applies `config` to a node in maintenance mode: server TLS only, no client certificate.
    async fn apply_maintenance(&self, endpoint: &str, config: &str) -> Result<(), NodeError>;
    /// Upgrades the node to `image`.
    async fn upgrade(&self, t: &NodeTarget, image: &str) -> Result<(), NodeError>;
    /// What keeps the node from being healthy: its stage not running, services not up.
    async fn unhealthy(&self, t: &NodeTarget) -> Result<Vec<String>, NodeError>;
    /// Resets the node (graceful, then reboot).
    async fn reset(&self, t: &NodeTarget) -> Result<(), NodeError>;
    /// Drops any connection to `endpoint` (the machine went away).
    fn forget(&self, _endpoint: &str) {}
}

/// The diff a dry-run reply carries: structured when the node is talosbox, Talos's text
/// otherwise. Empty means no drift.
pub fn dry_run_diff(messages: &[m::ApplyConfiguration]) -> String {
    let mut diffs = Vec::new();
    for msg in messages {
        let text = text_diff(&msg.mode_details);
        if !msg.diff_json.is_empty()
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&msg.diff_json)
            && let Some(docs) = v.get("documents").and_then(|d| d.as_array())
        {
            if docs.is_empty() {
                continue;
            }
            diffs.push(if text.is_empty() { msg.diff_json.clone() } else { text });
            continue;
        }
        if !text.is_empty() {
            diffs.push(text);
        }
    }
    diffs.join("\n")
}

/// The text after the last "Config diff:" marker; "No changes." is no diff.
pub fn text_diff(mode_details: &str) -> String {
    let Some((_, after)) = mode_details.rsplit_once("Config diff:") else { return String::new() };
    let after = after.trim();
    if after == "No changes." { String::new() } else { after.to_string() }
}

/// How long one call may take unless told otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// The node client over the Talos API: one cached channel per endpoint and credentials.
pub struct GrpcNodes {
    channels: Mutex<HashMap<(String, String), Channel>>,
    timeout: Duration,
}

impl Default for GrpcNodes {
    fn default() -> Self {
        GrpcNodes::new(DEFAULT_CALL_TIMEOUT)
    }
}

impl GrpcNodes {
    pub fn new(timeout: Duration) -> GrpcNodes {
        GrpcNodes { channels: Mutex::new(HashMap::new()), timeout }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Channel>> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn channel(
        &self,
        endpoint: &str,
        tls_id: &str,
        tls: Arc<rustls::ClientConfig>,
    ) -> Result<Channel, NodeError> {
        let key = (endpoint.to_string(), tls_id.to_string());
        if let Some(c) = self.lock().get(&key) {
            return Ok(c.clone());
        }
        let dial = crate::client::conn::dial(endpoint, APID_PORT, tls);
        let channel = tokio::time::timeout(self.timeout, dial)
            .await
            .map_err(|_| NodeError::Timeout { endpoint: endpoint.into(), call: "connect", timeout: self.timeout })?
            .map_err(|e| NodeError::Connect { endpoint: endpoint.into(), detail: e.to_string() })?;
        // Different credentials for the same endpoint replace the old channel.
        let mut channels = self.lock();
        channels.retain(|(e, _), _| e != endpoint);
        channels.insert(key, channel.clone());
        Ok(channel)
    }

    async fn machine(
        &self,
        t: &NodeTarget,
    ) -> Result<m::machine_service_client::MachineServiceClient<Channel>, NodeError> {
        let channel = self.channel(&t.endpoint, &t.credentials.id, t.credentials.tls.clone()).await?;
        Ok(m::machine_service_client::MachineServiceClient::new(channel)
            .max_decoding_message_size(crate::api::proxy::MAX_MESSAGE_SIZE as usize)
            .max_encoding_message_size(crate::api::proxy::MAX_MESSAGE_SIZE as usize))
    }

    /// Runs one call with the timeout; a failed call drops the channel so the next dials anew.
    async fn call<T>(
        &self,
        endpoint: &str,
        call: &'static str,
        fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, NodeError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(status)) => {
                if matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Internal) {
                    self.forget(endpoint);
                }
                Err(NodeError::Call {
                    endpoint: endpoint.into(),
                    call,
                    detail: crate::client::api::status_line(&status),
                })
            }
            Err(_) => {
                self.forget(endpoint);
                Err(NodeError::Timeout { endpoint: endpoint.into(), call, timeout: self.timeout })
            }
        }
    }

    fn apply_request(config: &str, dry_run: bool) -> m::ApplyConfigurationRequest {
        m::ApplyConfigurationRequest {
            data: config.as_bytes().to_vec(),
            mode: Mode::Auto as i32,
            dry_run,
            try_mode_timeout: None,
        }
    }
}

#[async_trait]
impl NodeClient for GrpcNodes {
    async fn version(&self, t: &NodeTarget) -> Result<String, NodeError> {
        let mut c = self.machine(t).await?;
        let reply = self.call(&t.endpoint, "Version", c.version(())).await?;
        reply.messages.into_iter().next().and_then(|m| m.version).map(|v| v.tag).ok_or_else(|| NodeError::Call {
            endpoint: t.endpoint.clone(),
            call: "Version",
            detail: "no version in the reply".into(),
        })
    }

    async fn dry_run(&self, t: &NodeTarget, config: &str) -> Result<String, NodeError> {
        let mut c = self.machine(t).await?;
        let reply = self
            .call(
                &t.endpoint,
                "ApplyConfiguration (dry run)",
                c.apply_configuration(GrpcNodes::apply_request(config, true)),
            )
            .await?;
        Ok(dry_run_diff(&reply.messages))
    }

    async fn apply(&self, t: &NodeTarget, config: &str) -> Result<(), NodeError> {
        let mut c = self.machine(t).await?;
        self.call(&t.endpoint, "ApplyConfiguration", c.apply_configuration(GrpcNodes::apply_request(config, false)))
            .await?;
        Ok(())
    }

    async fn apply_maintenance(&self, endpoint: &str, config: &str) -> Result<(), NodeError> {
        let tls = crate::pki::tls::insecure_client_config(None)
            .map_err(|e| NodeError::Connect { endpoint: endpoint.into(), detail: e.to_string() })?;
        // Never cached: the node's maintenance certificate goes once it is configured.
        let dial = crate::client::conn::dial(endpoint, APID_PORT, tls);
        let channel = tokio::time::timeout(self.timeout, dial)
            .await
            .map_err(|_| NodeError::Timeout { endpoint: endpoint.into(), call: "connect", timeout: self.timeout })?
            .map_err(|e| NodeError::Connect { endpoint: endpoint.into(), detail: e.to_string() })?;
        let mut c = m::machine_service_client::MachineServiceClient::new(channel);
        self.call(
            endpoint,
            "ApplyConfiguration (maintenance)",
            c.apply_configuration(GrpcNodes::apply_request(config, false)),
        )
        .await?;
        Ok(())
    }

    async fn upgrade(&self, t: &NodeTarget, image: &str) -> Result<(), NodeError> {
        let mut c = self.machine(t).await?;
        let request = m::UpgradeRequest { image: image.to_string(), preserve: true, ..Default::default() };
        self.call(&t.endpoint, "Upgrade", c.upgrade(request)).await?;
        Ok(())
    }

    async fn unhealthy(&self, t: &NodeTarget) -> Result<Vec<String>, NodeError> {
        use crate::proto::cosi::resource as wire;
        let channel = self.channel(&t.endpoint, &t.credentials.id, t.credentials.tls.clone()).await?;
        let mut state = wire::state_client::StateClient::new(channel)
            .max_decoding_message_size(crate::api::proxy::MAX_MESSAGE_SIZE as usize);
        let request = wire::GetRequest {
            namespace: "runtime".into(),
            r#type: "MachineStatuses.runtime.talos.dev".into(),
            id: "machine".into(),
            options: None,
        };
        let status = self.call(&t.endpoint, "State.Get MachineStatus", state.get(request)).await?;
        let mut problems: Vec<String> = health::stage_problem(&health::spec_of(status)).into_iter().collect();
        let mut c = self.machine(t).await?;
        let services = self.call(&t.endpoint, "ServiceList", c.service_list(())).await?;
        problems.extend(health::service_problems(services));
        Ok(problems)
    }

    async fn reset(&self, t: &NodeTarget) -> Result<(), NodeError> {
        let mut c = self.machine(t).await?;
        let request = m::ResetRequest { graceful: true, reboot: true, ..Default::default() };
        self.call(&t.endpoint, "Reset", c.reset(request)).await?;
        Ok(())
    }

    fn forget(&self, endpoint: &str) {
        self.lock().retain(|(e, _), _| e != endpoint);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(details: &str, json: &str) -> m::ApplyConfiguration {
        m::ApplyConfiguration { mode_details: details.into(), diff_json: json.into(), ..Default::default() }
    }

    #[test]
    fn talos_text_diffs_are_read_after_the_last_marker() {
        let talos = "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\n--- a\n+++ b\n@@ -1 +1 @@\n-  hostname: a\n+  hostname: b\n";
        assert_eq!(dry_run_diff(&[msg(talos, "")]), "--- a\n+++ b\n@@ -1 +1 @@\n-  hostname: a\n+  hostname: b");
        let none = "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\nNo changes.";
        assert_eq!(dry_run_diff(&[msg(none, "")]), "");
        assert_eq!(dry_run_diff(&[msg("Applied configuration without a reboot", "")]), "");
        // The marker inside the diff itself: the last one counts.
        assert_eq!(text_diff("Config diff:\nx\nConfig diff:\nNo changes."), "");
    }

    #[test]
    fn talosbox_structured_diffs_decide_when_present() {
        let empty = r#"{"documents":[]}"#;
        let some = r#"{"documents":[{"document":{"kind":"v1alpha1"},"changes":[]}]}"#;
        assert_eq!(dry_run_diff(&[msg("Config diff:\n\nNo changes.", empty)]), "");
        assert_eq!(dry_run_diff(&[msg("Config diff:\n\n-a\n+b", some)]), "-a\n+b");
        assert_eq!(dry_run_diff(&[msg("", some)]), some, "the structured diff stands in for a missing text");
    }
}
