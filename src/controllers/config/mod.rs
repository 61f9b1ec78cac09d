//! Configuration controllers: the machine configuration in force, as resources.

pub mod machine_config;

pub use machine_config::MachineConfigController;

use std::sync::Arc;
use std::time::SystemTime;

use crate::config::ConfigError;
use crate::resources::config::{MachineConfig, ParsedConfig};

/// What the configuration store holds: what machined's store publishes and
/// [`MachineConfigController`] turns into resources. Texts are already validated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredConfig {
    /// The stored configuration (what the next boot uses).
    pub persisted: Option<ConfigText>,
    /// The configuration in force.
    pub active: Option<ConfigText>,
    /// While a try-mode apply is in force: when it falls back.
    pub try_until: Option<SystemTime>,
    /// The store is waiting for its volume (STATE) to be mounted: whether there is a
    /// configuration is not known yet.
    pub pending: bool,
}

/// A configuration text with what it parsed to, parsed once ([`machine_config::parse`]) when
/// the text came in: every reader of the store — the config controller, and machined's
/// hostname, install and checks — takes this one parse, shared. Cheap to clone; derefs to
/// the text. Two are equal when their texts are (the parse follows from the text).
#[derive(Clone)]
pub struct ConfigText(Arc<Parsed>);

struct Parsed {
    text: Arc<str>,
    config: Result<MachineConfig, ConfigError>,
}

impl ConfigText {
    /// Parses `text`.
    pub fn new(text: impl Into<Arc<str>>) -> Self {
        let text = text.into();
        let config = machine_config::parse(&text);
        ConfigText(Arc::new(Parsed { text, config }))
    }

    pub fn text(&self) -> &Arc<str> {
        &self.0.text
    }

    /// The `MachineConfig` resource of the text, or why it does not load (a text that does
    /// not load is no configuration).
    pub fn machine_config(&self) -> Result<&MachineConfig, &ConfigError> {
        self.0.config.as_ref()
    }

    /// The parsed configuration; `None` when the text does not load.
    pub fn parsed(&self) -> Option<&Arc<ParsedConfig>> {
        self.0.config.as_ref().ok().and_then(MachineConfig::parsed)
    }
}

impl std::ops::Deref for ConfigText {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0.text
    }
}

impl PartialEq for ConfigText {
    fn eq(&self, other: &Self) -> bool {
        self.0.text == other.0.text
    }
}

impl Eq for ConfigText {}

impl std::fmt::Debug for ConfigText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0.text, f)
    }
}

impl From<&str> for ConfigText {
    fn from(text: &str) -> Self {
        ConfigText::new(text)
    }
}

impl From<String> for ConfigText {
    fn from(text: String) -> Self {
        ConfigText::new(text)
    }
}

impl From<Arc<str>> for ConfigText {
    fn from(text: Arc<str>) -> Self {
        ConfigText::new(text)
    }
}
