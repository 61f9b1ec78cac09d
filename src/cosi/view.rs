//! The read-only, role-scoped view of the state the API is handed.
//!
//! It offers get, list and watch only, by type name, for registered types only; a caller
//! without `os:admin` asking for a `Sensitive` type (machine configuration, keys) is refused
//! with `PermissionDenied`, never answered with an empty list. Of a type that is not
//! sensitive but has resources that are (META keys whose tags may hold secrets), such a
//! caller's get or single watch of one is refused the same way, and its lists and kind
//! watches never carry one. It cannot write.

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

    fn check(&self, type_name: &str) -> Result<&super::resource::ResourceType, StateError> {
        let t =
            self.registry.get(type_name).ok_or_else(|| StateError::UnknownType { type_name: type_name.to_string() })?;
        if t.definition().sensitivity == Sensitivity::Sensitive && self.access != Access::All {
            return Err(StateError::PermissionDenied { type_name: type_name.to_string() });
        }
        Ok(&t.resource_type)
    }

    /// [`Self::check`], and the resource `id` itself.
    fn check_id(&self, type_name: &str, id: &str) -> Result<(), StateError> {
        let t = self.check(type_name)?;
        if self.access != Access::All && t.is_sensitive(id) {
            return Err(StateError::PermissionDenied { type_name: format!("{type_name} {id}") });
        }
        Ok(())
    }

    pub fn get(&self, namespace: &str, type_name: &str, id: &str) -> Result<Arc<AnyResource>, StateError> {
        self.check_id(type_name, id)?;
        self.state.backend().get(namespace, type_name, id)
    }

    pub fn list(
        &self,
        namespace: &str,
        type_name: &str,
        options: &ListOptions,
    ) -> Result<Vec<Arc<AnyResource>>, StateError> {
        let t = *self.check(type_name)?;
        let mut found = self.state.backend().list(namespace, type_name, options);
        if self.access != Access::All {
            found.retain(|r| !t.is_sensitive(&r.metadata.id));
        }
        Ok(found)
    }

    pub fn watch_kind(&self, namespace: &str, type_name: &str, options: &WatchOptions) -> Result<Watch, StateError> {
        let t = *self.check(type_name)?;
        let watch = self.state.backend().watch_kind(namespace, type_name, options);
        Ok(if self.access == Access::All { watch } else { watch.hiding(t.sensitive_ids()) })
    }

    pub fn watch(&self, namespace: &str, type_name: &str, id: &str) -> Result<Watch, StateError> {
        self.check_id(type_name, id)?;
        Ok(self.state.backend().watch(namespace, type_name, id))
    }
}
