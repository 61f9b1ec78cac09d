//! The read-only, role-scoped view of the state the API is handed.
//!
//! It offers get, list and watch only, by type name, for registered types only; a caller
//! without `os:admin` asking for a `Sensitive` type (machine configuration, keys) is refused
//! with `PermissionDenied`, never answered with an empty list. It cannot write.

use std::sync::Arc;

use super::definition::Sensitivity;
use super::query::{ListOptions, WatchOptions};
use super::registry::Registry;
use super::resource::AnyResource;
use super::state::{State, StateError, Watch};

/// The role that may read sensitive types.
pub const ADMIN_ROLE: &str = "os:admin";

/// What a caller may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Everything, sensitive types included.
    All,
    /// Every type but the sensitive ones.
    NonSensitive,
}

impl Access {
    /// The access a caller holding `roles` gets: everything only with `os:admin`.
    pub fn for_roles<S: AsRef<str>>(roles: &[S]) -> Self {
        if roles.iter().any(|r| r.as_ref() == ADMIN_ROLE) { Access::All } else { Access::NonSensitive }
    }
}

#[derive(Clone)]
pub struct StateView {
    state: State,
    registry: Arc<Registry>,
    access: Access,
}

impl StateView {
    pub fn new(state: State, registry: Arc<Registry>, access: Access) -> Self {
        StateView { state, registry, access }
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn access(&self) -> Access {
        self.access
    }

    fn check(&self, type_name: &str) -> Result<(), StateError> {
        let t =
            self.registry.get(type_name).ok_or_else(|| StateError::UnknownType { type_name: type_name.to_string() })?;
        if t.definition().sensitivity == Sensitivity::Sensitive && self.access != Access::All {
            return Err(StateError::PermissionDenied { type_name: type_name.to_string() });
        }
        Ok(())
    }

    pub fn get(&self, namespace: &str, type_name: &str, id: &str) -> Result<Arc<AnyResource>, StateError> {
        self.check(type_name)?;
        self.state.backend().get(namespace, type_name, id)
    }

    pub fn list(
        &self,
        namespace: &str,
        type_name: &str,
        options: &ListOptions,
    ) -> Result<Vec<Arc<AnyResource>>, StateError> {
        self.check(type_name)?;
        Ok(self.state.backend().list(namespace, type_name, options))
    }

    pub fn watch_kind(&self, namespace: &str, type_name: &str, options: &WatchOptions) -> Result<Watch, StateError> {
        self.check(type_name)?;
        Ok(self.state.backend().watch_kind(namespace, type_name, options))
    }

    pub fn watch(&self, namespace: &str, type_name: &str, id: &str) -> Result<Watch, StateError> {
        self.check(type_name)?;
        Ok(self.state.backend().watch(namespace, type_name, id))
    }
}
