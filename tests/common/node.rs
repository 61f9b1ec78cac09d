//! A `Node` for the API tests that run machined's services below apid: a mode, a platform and
//! a META store that a test can change, and nothing else. Power, reset, services and time
//! answer Unimplemented; block-device wipes go to the hook a test gives, or are Unimplemented
//! as on a node that has none, and each request is remembered.
//! Included with `#[path = "common/node.rs"] mod node;` (tests are separate crates, each
//! using part of it).
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use talosbox::api::events::EventLog;
use talosbox::api::node::{
    ApplyPermit, BlockDeviceWipe, LogSource, Node, NodeMode, PowerAction, ResetRequest, ServiceAction, ServiceInfo,
};
use talosbox::block::meta::MetaStore;

type WipeHook = Box<dyn Fn(&BlockDeviceWipe) -> Result<(), String> + Send + Sync>;

pub struct TestNode {
    hostname: &'static str,
    pub mode: Mutex<NodeMode>,
    pub platform: Mutex<&'static str>,
    meta: Arc<MetaStore>,
    events: Arc<EventLog>,
    wipe: Option<WipeHook>,
    /// The wipes asked for and done, in order.
    pub wiped: Mutex<Vec<BlockDeviceWipe>>,
}

impl TestNode {
    /// A configured `metal` node called `hostname`, with an empty META.
    pub fn new(hostname: &'static str) -> TestNode {
        TestNode {
            hostname,
            mode: Mutex::new(NodeMode::Configured),
            platform: Mutex::new("metal"),
            meta: MetaStore::new(),
            events: Arc::new(EventLog::new(16)),
            wipe: None,
            wiped: Mutex::new(Vec::new()),
        }
    }

    pub fn with_meta(self, meta: Arc<MetaStore>) -> TestNode {
        TestNode { meta, ..self }
    }

    pub fn with_wipe(self, wipe: impl Fn(&BlockDeviceWipe) -> Result<(), String> + Send + Sync + 'static) -> TestNode {
        TestNode { wipe: Some(Box::new(wipe)), ..self }
    }
}

fn not_here() -> tonic::Status {
    tonic::Status::unimplemented("not here")
}

#[tonic::async_trait]
impl Node for TestNode {
    fn mode(&self) -> NodeMode {
        *self.mode.lock().unwrap()
    }
    fn hostname(&self) -> String {
        self.hostname.into()
    }
    fn platform(&self) -> (String, String) {
        let p = *self.platform.lock().unwrap();
        (p.into(), p.into())
    }
    fn power(&self, _: PowerAction) -> Result<(), tonic::Status> {
        Err(not_here())
    }
    async fn reset(&self, _: ResetRequest) -> Result<(), tonic::Status> {
        Err(not_here())
    }
    fn services(&self) -> Vec<ServiceInfo> {
        Vec::new()
    }
    async fn service(&self, _: &str, _: ServiceAction) -> Result<(), tonic::Status> {
        Err(not_here())
    }
    fn logs(&self, _: &str) -> Option<Arc<dyn LogSource>> {
        None
    }
    fn events(&self) -> Arc<EventLog> {
        self.events.clone()
    }
    fn configs(&self) -> (Option<Arc<str>>, Option<Arc<str>>) {
        (None, None)
    }
    fn begin_apply(&self) -> Option<Box<dyn ApplyPermit>> {
        None
    }
    fn meta(&self) -> Arc<MetaStore> {
        self.meta.clone()
    }
    async fn query_time(&self, _: &str) -> Result<(SystemTime, i128), tonic::Status> {
        Err(not_here())
    }
    async fn wipe_block_devices(&self, wipes: Vec<BlockDeviceWipe>) -> Result<(), tonic::Status> {
        let Some(wipe) = &self.wipe else {
            return Err(tonic::Status::unimplemented("this node cannot wipe block devices"));
        };
        for w in &wipes {
            wipe(w).map_err(tonic::Status::internal)?;
        }
        self.wiped.lock().unwrap().extend(wipes);
        Ok(())
    }
}
