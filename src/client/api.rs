//! A session with the Talos API as talosctl opens it: the talosconfig's context (or flags that
//! override it), one connection to the first endpoint that answers, and the nodes each call
//! is addressed to.
//!
//! Endpoints are tried starting at a position that varies per process (spreading clients over
//! the endpoints, as Talos's round-robin balancer does) and in order after it; the first that
//! completes a TLS handshake is used. Nodes are never dialled: each call names its node in the
//! `node` metadata and the endpoint's apid routes it. Several nodes are one call per node,
//! made by the client, each reply tagged with the node it came from.

use std::path::PathBuf;
use std::sync::Arc;

use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use crate::proto::conn::{self, DialError};
use crate::proto::cosi::resource::state_client::StateClient;
use crate::proto::machine::machine_service_client::MachineServiceClient;
use crate::proto::talosconfig::{ClientConfigError, Config, Credentials, Lookup};
use crate::proto::{MAX_MESSAGE_SIZE, keys};

/// apid's port, the default for endpoints that name none.
pub use crate::proto::APID_PORT;

/// How to open a session: what the command line overrides.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// `--talosconfig`: this file instead of the lookup's.
    pub talosconfig: Option<PathBuf>,
    /// `--context`: this context instead of the file's current one.
    pub context: Option<String>,
    /// `-e`: these endpoints instead of the context's.
    pub endpoints: Vec<String>,
    /// `-n`: these nodes instead of the context's.
    pub nodes: Vec<String>,
    /// `--insecure`: no client certificate and no server verification (maintenance mode).
    pub insecure: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{0}")]
    Config(#[from] ClientConfigError),
    #[error(
        "no endpoints: pass -e/--endpoints or set them with `talosctl config endpoint`{}",
        context.as_ref().map(|c| format!(" (context {c:?} has none)")).unwrap_or_default()
    )]
    NoEndpoints { context: Option<String> },
    #[error("context {context:?} has no client certificate: use --insecure for a node in maintenance mode")]
    NoIdentity { context: String },
    #[error("context {context:?} has no CA: use --insecure for a node in maintenance mode")]
    NoCa { context: String },
    #[error("TLS set-up: {0}")]
    Tls(#[from] crate::pki::PkiError),
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Unreachable(Vec<DialError>),
}

/// An open session.
pub struct Session {
    channel: Channel,
    /// The endpoint connected to.
    pub endpoint: String,
    /// The nodes calls go to; empty: the endpoint's own node.
    pub nodes: Vec<String>,
}

/// Where one call goes: a node named in metadata, or the endpoint itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target(pub Option<String>);

impl Target {
    /// How replies from this target are labelled (`NODE` columns, error prefixes).
    pub fn label<'a>(&'a self, session: &'a Session) -> &'a str {
        self.0.as_deref().unwrap_or(&session.endpoint)
    }
}

impl Session {
    /// Opens a session: reads the talosconfig unless `--insecure` with endpoints makes it
    /// unnecessary, then dials.
    pub async fn open(options: &SessionOptions) -> Result<Session, SessionError> {
        let needs_file = !options.insecure || options.endpoints.is_empty();
        let (endpoints, nodes, credentials, context) = if needs_file {
            let config = match &options.talosconfig {
                Some(path) => Config::load(path)?,
                None => Config::load_default(&Lookup::from_env())?.0,
            };
            let (name, ctx) = match &options.context {
                Some(name) => {
                    (name.clone(), config.contexts.get(name).cloned().ok_or_else(|| config_no_such(&config, name))?)
                }
                None => config.current().map(|(n, c)| (n.to_string(), c.clone()))?,
            };
            let credentials = config.credentials(&name)?;
            (ctx.endpoints, ctx.nodes, Some(credentials), Some(name))
        } else {
            (Vec::new(), Vec::new(), None, None)
        };
        let endpoints = if options.endpoints.is_empty() { endpoints } else { options.endpoints.clone() };
        let nodes = if options.nodes.is_empty() { nodes } else { options.nodes.clone() };
        if endpoints.is_empty() {
            return Err(SessionError::NoEndpoints { context });
        }
        let tls = tls_for(options.insecure, credentials.as_ref(), context.as_deref().unwrap_or(""))?;
        let (channel, endpoint) = dial_any(&endpoints, tls).await?;
        Ok(Session { channel, endpoint, nodes })
    }

    /// The calls' targets: each node, or the endpoint itself when no node is named.
    pub fn targets(&self) -> Vec<Target> {
        if self.nodes.is_empty() {
            vec![Target(None)]
        } else {
            self.nodes.iter().cloned().map(Some).map(Target).collect()
        }
    }

    /// `message` addressed to `target`.
    pub fn request<T>(&self, target: &Target, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(node) = &target.0
            && let Ok(value) = MetadataValue::try_from(node.as_str())
        {
            request.metadata_mut().insert(keys::NODE, value);
        }
        request
    }

    /// The connection, for a client of a service not wrapped here.
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    pub fn machine(&self) -> MachineServiceClient<Channel> {
        MachineServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_SIZE as usize)
            .max_encoding_message_size(MAX_MESSAGE_SIZE as usize)
    }

    pub fn time(&self) -> crate::proto::time::time_service_client::TimeServiceClient<Channel> {
        crate::proto::time::time_service_client::TimeServiceClient::new(self.channel.clone())
    }

    pub fn storage(&self) -> crate::proto::storage::storage_service_client::StorageServiceClient<Channel> {
        crate::proto::storage::storage_service_client::StorageServiceClient::new(self.channel.clone())
    }

    pub fn volumes(&self) -> crate::proto::talosbox::volume::volume_service_client::VolumeServiceClient<Channel> {
        crate::proto::talosbox::volume::volume_service_client::VolumeServiceClient::new(self.channel.clone())
    }

    pub fn state(&self) -> StateClient<Channel> {
        StateClient::new(self.channel.clone()).max_decoding_message_size(MAX_MESSAGE_SIZE as usize)
    }
}

fn config_no_such(config: &Config, name: &str) -> ClientConfigError {
    ClientConfigError::NoSuchContext {
        file: config.path().map(|p| p.display().to_string()).unwrap_or_default(),
        name: name.to_string(),
        known: config.contexts.keys().cloned().collect::<Vec<_>>().join(", "),
    }
}

fn tls_for(
    insecure: bool,
    credentials: Option<&Credentials>,
    context: &str,
) -> Result<Arc<rustls::ClientConfig>, SessionError> {
    if insecure {
        return Ok(crate::pki::tls::insecure_client_config(None)?);
    }
    let credentials = credentials.ok_or_else(|| SessionError::NoCa { context: context.to_string() })?;
    let ca = credentials.ca_pem.as_ref().ok_or_else(|| SessionError::NoCa { context: context.to_string() })?;
    let identity =
        credentials.identity.as_ref().ok_or_else(|| SessionError::NoIdentity { context: context.to_string() })?;
    Ok(crate::pki::tls::client_config(&[ca], Some(identity))?)
}

/// The first endpoint (from a per-process starting point) that accepts a connection.
async fn dial_any(endpoints: &[String], tls: Arc<rustls::ClientConfig>) -> Result<(Channel, String), SessionError> {
    let start = std::process::id() as usize % endpoints.len();
    let mut failures = Vec::new();
    for i in 0..endpoints.len() {
        let endpoint = &endpoints[(start + i) % endpoints.len()];
        match conn::dial(endpoint, APID_PORT, tls.clone()).await {
            Ok(channel) => return Ok((channel, endpoint.clone())),
            Err(e) => failures.push(e),
        }
    }
    Err(SessionError::Unreachable(failures))
}

/// A gRPC failure in one line: `code: message`, with the transport's cause when it has one.
pub fn status_line(status: &tonic::Status) -> String {
    use std::error::Error as _;
    let mut line = format!("{:?}: {}", status.code(), status.message());
    let mut source = status.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}
