//! The in-memory backend against the state conformance suite.

use std::sync::Arc;

use talosbox::cosi::{InMemoryState, StateBackend};

talosbox::state_conformance_tests!(|history: usize| -> Arc<dyn StateBackend> {
    Arc::new(InMemoryState::with_history(history))
});
