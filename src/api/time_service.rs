//! `time.TimeService`: the node asks a time server over SNTP, from its own network, and answers
//! with its clock and the server's. `Time` asks the first of the node's time servers
//! (`TimeServerStatus`); `TimeCheck` the one named. The clock is only read: keeping it is the
//! time sync controller's work.

use std::sync::Arc;
use tonic::{Request, Response, Status};

use super::node::Node;
use super::timestamp;
use crate::cosi::State;
use crate::proto::time::{self as t, time_service_server::TimeService};
use crate::resources::network::{self as net, TimeServerStatus};

pub struct TimeApi {
    node: Arc<dyn Node>,
    state: State,
}

impl TimeApi {
    pub fn new(node: Arc<dyn Node>, state: State) -> Self {
        TimeApi { node, state }
    }

    async fn check(&self, server: &str) -> Result<Response<t::TimeResponse>, Status> {
        let (local, offset_nanos) = self.node.query_time(server).await?;
        Ok(Response::new(t::TimeResponse {
            messages: vec![t::Time {
                metadata: None,
                server: server.to_string(),
                localtime: Some(timestamp(local)),
                remotetime: Some(timestamp(crate::kernel::clock::shifted(local, offset_nanos))),
            }],
        }))
    }
}

#[tonic::async_trait]
impl TimeService for TimeApi {
    async fn time(&self, _: Request<()>) -> Result<Response<t::TimeResponse>, Status> {
        let servers = self
            .state
            .get::<TimeServerStatus>(net::NAMESPACE, TimeServerStatus::ID)
            .map(|r| r.spec().time_servers.clone())
            .unwrap_or_default();
        let Some(first) = servers.first() else {
            return Err(Status::failed_precondition(
                "this node knows no time servers (no TimeServerStatus); name one with --check",
            ));
        };
        self.check(first).await
    }

    async fn time_check(&self, request: Request<t::TimeRequest>) -> Result<Response<t::TimeResponse>, Status> {
        let server = request.into_inner().server;
        if server.trim().is_empty() {
            return Err(Status::invalid_argument("server: a time server to ask is required"));
        }
        self.check(server.trim()).await
    }
}
