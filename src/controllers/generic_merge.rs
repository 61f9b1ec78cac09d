//! `GenericMergeController`: layered candidates in one namespace become one merged resource
//! per key in another, highest layer winning. One generic engine; every merged type (address,
//! route, link, hostname, resolver, time server …) is an instance of it.
//!
//! The merge itself is the pure function [`merge`]; the controller only keeps an index of
//! which candidates feed which key, so a change re-merges just the keys it touches. An
//! instance is a spec that says its layer and key:
//!
//! ```ignore
//! impl Mergeable for AddressSpec {
//!     type Layer = ConfigLayer;
//!     fn layer(&self) -> ConfigLayer {
//!         self.config_layer
//!     }
//!     fn merge_id(&self) -> String {
//!         format!("{}/{}", self.link_name, self.address)
//!     }
//! }
//! // registered as GenericMergeController::<AddressSpec>::new("network-config", "network")
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::marker::PhantomData;

use crate::cosi::{Context, Controller, Input, Output, Pointer, ReconcileError, Resource, ResourceSpec};

/// A spec that arrives as layered candidates and is merged per key.
pub trait Mergeable: ResourceSpec {
    type Layer: Ord + Copy + Debug + Send + Sync;

    fn layer(&self) -> Self::Layer;
    /// The id of the merged resource this candidate competes for.
    fn merge_id(&self) -> String;
    /// The candidate as it takes part in the merge; a type drops here what a merged resource
    /// must not carry (Talos drops kernel-managed address flags). The default keeps it whole.
    fn admit(candidate: &Self) -> Self {
        candidate.clone()
    }
    /// Folds `candidate`, at the same or a higher layer, into the result so far. The default
    /// is "the higher layer replaces".
    fn merge_into(merged: &mut Self, candidate: &Self) {
        *merged = candidate.clone();
    }
}

/// Merges candidates given as (candidate id, spec): per key, candidates are folded from the
/// lowest layer up; within a layer, in candidate-id order, so the result never depends on the
/// order they are listed in.
pub fn merge<'a, T: Mergeable>(candidates: impl IntoIterator<Item = (&'a str, &'a T)>) -> BTreeMap<String, T> {
    let mut ordered: Vec<(&str, &T)> = candidates.into_iter().collect();
    ordered.sort_by(|a, b| a.1.layer().cmp(&b.1.layer()).then_with(|| a.0.cmp(b.0)));
    let mut merged: BTreeMap<String, T> = BTreeMap::new();
    for (_, candidate) in ordered {
        let candidate = T::admit(candidate);
        match merged.get_mut(&candidate.merge_id()) {
            Some(current) => T::merge_into(current, &candidate),
            None => {
                merged.insert(candidate.merge_id(), candidate);
            }
        }
    }
    merged
}

/// The controller name for a merged type: `AddressSpecs.net.talos.dev` →
/// `AddressMergeController`.
pub fn controller_name(type_name: &str) -> String {
    let short = type_name.split('.').next().unwrap_or(type_name);
    let singular = short.strip_suffix('s').unwrap_or(short);
    if singular.contains("Spec") {
        singular.replacen("Spec", "MergeController", 1)
    } else {
        format!("{singular}MergeController")
    }
}

pub struct GenericMergeController<T: Mergeable> {
    /// Where candidates live (`network-config`).
    candidates: String,
    /// Where merged resources go (`network`).
    merged: String,
    /// candidate id → the key it feeds.
    key_of: HashMap<String, String>,
    /// key → the candidates feeding it.
    members: HashMap<String, BTreeSet<String>>,
    _spec: PhantomData<fn() -> T>,
}

impl<T: Mergeable> GenericMergeController<T> {
    /// Merges the candidates in namespace `candidates` into namespace `merged`.
    pub fn new(candidates: impl Into<String>, merged: impl Into<String>) -> Self {
        GenericMergeController {
            candidates: candidates.into(),
            merged: merged.into(),
            key_of: HashMap::new(),
            members: HashMap::new(),
            _spec: PhantomData,
        }
    }

    fn unindex(&mut self, id: &str) -> Option<String> {
        let key = self.key_of.remove(id)?;
        if let Some(set) = self.members.get_mut(&key) {
            set.remove(id);
            if set.is_empty() {
                self.members.remove(&key);
            }
        }
        Some(key)
    }

    fn index(&mut self, id: &str, key: String) {
        self.members.entry(key.clone()).or_default().insert(id.to_string());
        self.key_of.insert(id.to_string(), key);
    }

    /// Rebuilds the index from every candidate and applies every key; the rest of this
    /// controller's outputs are removed (held ones once released).
    fn full(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let candidates: Vec<Resource<T>> =
            ctx.list::<T>(&self.candidates)?.into_iter().filter(|r| r.is_running()).collect();
        self.key_of.clear();
        self.members.clear();
        for c in &candidates {
            self.index(c.id(), c.spec().merge_id());
        }
        ctx.start_tracking_outputs();
        for (key, spec) in merge(candidates.iter().map(|r| (r.id(), r.spec()))) {
            ctx.apply(&self.merged, &key, spec)?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }

    fn remerge(&mut self, ctx: &mut Context, key: &str) -> Result<(), ReconcileError> {
        let mut candidates = Vec::new();
        for id in self.members.get(key).into_iter().flatten() {
            if let Some(r) = ctx.get::<T>(&self.candidates, id)? {
                candidates.push(r);
            }
        }
        match merge(candidates.iter().map(|r| (r.id(), r.spec()))).remove(key) {
            // Still held from an earlier removal, the old resource stays until released; the
            // runtime then destroys it and hands the key back here to create it anew.
            Some(spec) => drop(ctx.apply(&self.merged, key, spec)?),
            None => drop(ctx.remove::<T>(&self.merged, key)?),
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl<T: Mergeable> Controller for GenericMergeController<T> {
    fn name(&self) -> String {
        controller_name(T::DEFINITION.type_name)
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak::<T>(self.candidates.clone())]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared::<T>()]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        if ctx.is_full() {
            return self.full(ctx);
        }
        let changed: Vec<Pointer> = ctx.changed().cloned().collect();
        let mut dirty = BTreeSet::new();
        for p in changed {
            if p.is::<T>(&self.merged) {
                // An output the runtime destroyed after its holders let go.
                dirty.insert(p.id);
                continue;
            }
            dirty.extend(self.unindex(&p.id));
            if let Some(r) = ctx.get::<T>(&self.candidates, &p.id)?
                && r.is_running()
            {
                let key = r.spec().merge_id();
                dirty.insert(key.clone());
                self.index(&p.id, key);
            }
        }
        for key in dirty {
            self.remerge(ctx, &key)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosi::{Harness, Phase, PrintColumn, ResourceDefinition, Sensitivity};
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct HostSpec {
        key: String,
        layer: u8,
        value: String,
    }

    impl ResourceSpec for HostSpec {
        const DEFINITION: ResourceDefinition = ResourceDefinition {
            type_name: "HostSpecs.test.talos.dev",
            aliases: &[],
            default_namespace: "test-config",
            print_columns: &[PrintColumn { name: "Value", json_path: "{.value}" }],
            sensitivity: Sensitivity::NonSensitive,
        };
    }

    impl Mergeable for HostSpec {
        type Layer = u8;

        fn layer(&self) -> u8 {
            self.layer
        }

        fn merge_id(&self) -> String {
            self.key.clone()
        }
    }

    fn spec(key: &str, layer: u8, value: &str) -> HostSpec {
        HostSpec { key: key.into(), layer, value: value.into() }
    }

    #[test]
    fn merge_table() {
        // (case, candidates as (candidate id, key, layer, value), expected key=value pairs)
        type Case = (
            &'static str,
            &'static [(&'static str, &'static str, u8, &'static str)],
            &'static [(&'static str, &'static str)],
        );
        let cases: &[Case] = &[
            ("empty", &[], &[]),
            ("single", &[("c/a", "a", 0, "x")], &[("a", "x")]),
            ("higher layer wins", &[("0/a", "a", 0, "low"), ("4/a", "a", 4, "high")], &[("a", "high")]),
            ("order of listing does not matter", &[("4/a", "a", 4, "high"), ("0/a", "a", 0, "low")], &[("a", "high")]),
            ("equal layers: later id wins", &[("x/a", "a", 2, "second"), ("m/a", "a", 2, "first")], &[("a", "second")]),
            (
                "keys are independent",
                &[("1/a", "a", 1, "a1"), ("3/b", "b", 3, "b3"), ("0/b", "b", 0, "b0"), ("2/a", "a", 2, "a2")],
                &[("a", "a2"), ("b", "b3")],
            ),
            ("lower layer alone survives", &[("1/c", "c", 1, "only")], &[("c", "only")]),
        ];
        for (name, candidates, want) in cases {
            let specs: Vec<(&str, HostSpec)> = candidates.iter().map(|(id, k, l, v)| (*id, spec(k, *l, v))).collect();
            let got: Vec<(String, String)> =
                merge(specs.iter().map(|(id, s)| (*id, s))).into_iter().map(|(k, s)| (k, s.value)).collect();
            let want: Vec<(String, String)> = want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            assert_eq!(got, want, "case {name:?}");
        }
    }

    #[test]
    fn names_follow_the_type() {
        assert_eq!(controller_name("AddressSpecs.net.talos.dev"), "AddressMergeController");
        assert_eq!(controller_name("HostSpecs.test.talos.dev"), "HostMergeController");
        assert_eq!(controller_name("Hostnames.net.talos.dev"), "HostnameMergeController");
    }

    fn harness() -> Harness {
        Harness::start(vec![Box::new(GenericMergeController::<HostSpec>::new("test-config", "test"))])
            .expect("register")
    }

    #[tokio::test]
    async fn merged_follows_the_highest_remaining_layer() {
        let h = harness();
        h.seed("test-config", "0/a", spec("a", 0, "default")).unwrap();
        h.assert_spec("test", "a", &spec("a", 0, "default")).await;
        h.seed("test-config", "4/a", spec("a", 4, "configured")).unwrap();
        h.assert_spec("test", "a", &spec("a", 4, "configured")).await;
        h.seed("test-config", "2/a", spec("a", 2, "dhcp")).unwrap();
        h.unseed::<HostSpec>("test-config", "4/a").unwrap();
        h.assert_spec("test", "a", &spec("a", 2, "dhcp")).await;
        h.unseed::<HostSpec>("test-config", "2/a").unwrap();
        h.unseed::<HostSpec>("test-config", "0/a").unwrap();
        h.assert_absent::<HostSpec>("test", "a").await;
        h.stop().await;
    }

    #[tokio::test]
    async fn candidate_changing_key_moves_the_merge() {
        let h = harness();
        h.seed("test-config", "c1", spec("a", 1, "v")).unwrap();
        h.assert_spec("test", "a", &spec("a", 1, "v")).await;
        h.seed("test-config", "c1", spec("b", 1, "v")).unwrap();
        h.assert_spec("test", "b", &spec("b", 1, "v")).await;
        h.assert_absent::<HostSpec>("test", "a").await;
        h.stop().await;
    }

    #[tokio::test]
    async fn held_merged_resource_waits_for_release() {
        let h = harness();
        h.seed("test-config", "c1", spec("a", 1, "v")).unwrap();
        h.assert_spec("test", "a", &spec("a", 1, "v")).await;
        h.state().add_finalizer::<HostSpec>("test", "a", "AddressSpecController").unwrap();
        h.unseed::<HostSpec>("test-config", "c1").unwrap();
        h.assert_eventually::<HostSpec, _>("test", "a", "tearing down but held", |r| {
            r.is_some_and(|r| r.metadata().phase == Phase::TearingDown)
        })
        .await;
        h.state().remove_finalizer::<HostSpec>("test", "a", "AddressSpecController").unwrap();
        h.assert_absent::<HostSpec>("test", "a").await;
        h.stop().await;
    }

    #[tokio::test]
    async fn candidate_returning_while_held_recreates_after_release() {
        let h = harness();
        h.seed("test-config", "c1", spec("a", 1, "old")).unwrap();
        h.assert_spec("test", "a", &spec("a", 1, "old")).await;
        h.state().add_finalizer::<HostSpec>("test", "a", "AddressSpecController").unwrap();
        h.unseed::<HostSpec>("test-config", "c1").unwrap();
        h.assert_eventually::<HostSpec, _>("test", "a", "tearing down but held", |r| {
            r.is_some_and(|r| r.metadata().phase == Phase::TearingDown)
        })
        .await;
        // Wanted again while held: other keys keep merging meanwhile.
        h.seed("test-config", "c2", spec("a", 2, "new")).unwrap();
        h.seed("test-config", "c3", spec("b", 1, "other")).unwrap();
        h.assert_spec("test", "b", &spec("b", 1, "other")).await;
        h.state().remove_finalizer::<HostSpec>("test", "a", "AddressSpecController").unwrap();
        let back = h.assert_spec("test", "a", &spec("a", 2, "new")).await;
        assert_eq!(back.metadata().phase, Phase::Running);
        h.stop().await;
    }

    #[tokio::test]
    async fn restart_rebuilds_from_existing_candidates() {
        let state = crate::cosi::State::in_memory();
        state.create(Resource::new("test-config", "1/a", spec("a", 1, "one")), "").unwrap();
        state.create(Resource::new("test-config", "3/a", spec("a", 3, "three")), "").unwrap();
        let h =
            Harness::start_on(state, vec![Box::new(GenericMergeController::<HostSpec>::new("test-config", "test"))])
                .unwrap();
        h.assert_spec("test", "a", &spec("a", 3, "three")).await;
        h.stop().await;
    }
}
