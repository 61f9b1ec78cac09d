//! trustd's record of what it signed and refused, received by machined on trustd's private
//! state socket (and nowhere else) and kept in the node's event log as a
//! `talosbox.trustd.CertificateEvent`, where `talosctl events` shows it; each one is also a
//! console line. trustd hands out no certificate this did not record.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::events::EventLog;
use crate::proto::talosbox::trustd::{CertificateEvent, RecordResponse, audit_server};

/// The event's type URL.
pub const CERTIFICATE_EVENT_TYPE: &str = "type.googleapis.com/talosbox.trustd.CertificateEvent";

/// How much of an event machined keeps: trustd is trusted, but a ring entry stays small.
const MAX_SANS: usize = 64;
const MAX_FIELD: usize = 1024;

pub struct AuditApi {
    events: Arc<EventLog>,
}

impl AuditApi {
    pub fn new(events: Arc<EventLog>) -> Self {
        AuditApi { events }
    }
}

/// The console line of one event: `trustd: signed serial S for peer P: SANs [..]` or
/// `trustd: refused peer P: reason (asked for [..])`.
pub fn describe(e: &CertificateEvent) -> String {
    let sans = e.sans.join(", ");
    if e.refused.is_empty() {
        format!("trustd: signed serial {} for peer {} (CN {:?}): SANs [{sans}]", e.serial, e.peer, e.common_name)
    } else {
        format!("trustd: refused peer {} (CN {:?}): {} (asked for [{sans}])", e.peer, e.common_name, e.refused)
    }
}

#[tonic::async_trait]
impl audit_server::Audit for AuditApi {
    async fn record(&self, request: Request<CertificateEvent>) -> Result<Response<RecordResponse>, Status> {
        let e = request.into_inner();
        let long =
            [&e.peer, &e.common_name, &e.serial, &e.refused].into_iter().chain(&e.sans).any(|f| f.len() > MAX_FIELD);
        if e.sans.len() > MAX_SANS || long {
            return Err(Status::invalid_argument(format!(
                "certificate event: at most {MAX_SANS} SANs of {MAX_FIELD} bytes per field"
            )));
        }
        crate::kernel::console::line(&describe(&e));
        let id = self.events.publish(CERTIFICATE_EVENT_TYPE, prost::Message::encode_to_vec(&e), "");
        Ok(Response::new(RecordResponse { id }))
    }
}

pub fn server(events: Arc<EventLog>) -> audit_server::AuditServer<AuditApi> {
    audit_server::AuditServer::new(AuditApi::new(events))
}
