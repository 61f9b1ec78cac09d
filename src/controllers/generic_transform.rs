//! `TransformController`: one output per input, computed by a pure function — the 1:1
//! mapping COSI's transform controller does (`VolumeConfig` → `VolumeStatus`, a link's
//! config → its spec …). One generic engine; each instance is a name, two namespaces and a
//! function.
//!
//! With input finalizers on, each input is held while its output exists: when the input
//! tears down, the output is torn down first, and the input is released only once the output
//! is destroyed — after whoever holds the output downstream has let go. A function that fails
//! for one input fails only that key (retried on its own back-off); its output is left as it
//! was, and its siblings go on.
//!
//! ```ignore
//! TransformController::new("VolumeStatusController", "runtime", "runtime", |_, config: &Resource<VolumeConfig>| {
//!     Ok(Some(VolumeStatus::pending_for(config.spec())))
//! })
//! .with_input_finalizers()
//! ```
//!
//! A reconcile after the first looks only at the inputs that changed (and at inputs whose
//! held output the runtime just destroyed); a change to an extra input, or a full reconcile,
//! looks at all of them.

use std::collections::{BTreeSet, HashMap};
use std::marker::PhantomData;

use crate::cosi::{Context, Controller, Input, Output, OutputKind, Pointer, ReconcileError, Resource, ResourceSpec};

/// Computes an input's output; `Ok(None)`: this input has no output (any old one goes).
pub type TransformFn<I, O> = dyn Fn(&Context, &Resource<I>) -> Result<Option<O>, ReconcileError> + Send + Sync;

pub struct TransformController<I: ResourceSpec, O: ResourceSpec> {
    name: String,
    input_namespace: String,
    output_namespace: String,
    transform: Box<TransformFn<I, O>>,
    output_id: fn(&str) -> String,
    input_finalizers: bool,
    output_kind: OutputKind,
    extra_inputs: Vec<Input>,
    /// Output id → the input it came from, for outputs handed back by the runtime.
    source_of: HashMap<String, String>,
    _types: PhantomData<fn(I) -> O>,
}

impl<I: ResourceSpec, O: ResourceSpec> TransformController<I, O> {
    /// `name` maps every `I` in `input_namespace` to an `O` of the same id in
    /// `output_namespace` through `transform`.
    pub fn new(
        name: impl Into<String>,
        input_namespace: impl Into<String>,
        output_namespace: impl Into<String>,
        transform: impl Fn(&Context, &Resource<I>) -> Result<Option<O>, ReconcileError> + Send + Sync + 'static,
    ) -> Self {
        TransformController {
            name: name.into(),
            input_namespace: input_namespace.into(),
            output_namespace: output_namespace.into(),
            transform: Box::new(transform),
            output_id: str::to_string,
            input_finalizers: false,
            output_kind: OutputKind::Exclusive,
            extra_inputs: Vec::new(),
            source_of: HashMap::new(),
            _types: PhantomData,
        }
    }

    /// Holds each input until its output is destroyed (the input becomes a strong one).
    pub fn with_input_finalizers(mut self) -> Self {
        self.input_finalizers = true;
        self
    }

    /// The output's id for an input id (the same id by default).
    pub fn with_output_id(mut self, output_id: fn(&str) -> String) -> Self {
        self.output_id = output_id;
        self
    }

    /// Shares the output type with other writers (each owns the ids it writes).
    pub fn with_shared_output(mut self) -> Self {
        self.output_kind = OutputKind::Shared;
        self
    }

    /// More inputs the function reads through its context; they wake the controller too.
    pub fn with_extra_input(mut self, input: Input) -> Self {
        self.extra_inputs.push(input);
        self
    }

    fn input_key(&self, id: &str) -> Pointer {
        Pointer::of::<I>(self.input_namespace.clone(), id)
    }

    /// Brings one input's output up to date; `None`: the input is gone.
    fn one(&mut self, ctx: &mut Context, id: &str, input: Option<Resource<I>>) -> Result<(), ReconcileError> {
        let out_id = (self.output_id)(id);
        let Some(input) = input else {
            self.source_of.remove(&out_id);
            ctx.remove::<O>(&self.output_namespace, &out_id)?;
            return Ok(());
        };
        self.source_of.insert(out_id.clone(), id.to_string());
        if !input.is_running() {
            // On its way out: the output goes first, then the hold on the input.
            if ctx.remove::<O>(&self.output_namespace, &out_id)? && self.input_finalizers {
                ctx.release(&input)?;
            }
            return Ok(());
        }
        if self.input_finalizers {
            ctx.hold(&input)?;
        }
        match (self.transform)(ctx, &input) {
            Ok(Some(output)) => drop(ctx.apply(&self.output_namespace, &out_id, output)?),
            Ok(None) => drop(ctx.remove::<O>(&self.output_namespace, &out_id)?),
            Err(e) => {
                ctx.keep::<O>(&self.output_namespace, &out_id);
                ctx.fail_key(self.input_key(id), e);
            }
        }
        Ok(())
    }

    fn full(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        ctx.start_tracking_outputs();
        self.source_of.clear();
        for input in ctx.list::<I>(&self.input_namespace)? {
            let id = input.id().to_string();
            self.one(ctx, &id, Some(input))?;
        }
        ctx.cleanup_outputs()?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl<I: ResourceSpec, O: ResourceSpec> Controller for TransformController<I, O> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn inputs(&self) -> Vec<Input> {
        let main = if self.input_finalizers {
            Input::strong::<I>(self.input_namespace.clone())
        } else {
            Input::weak::<I>(self.input_namespace.clone())
        };
        std::iter::once(main).chain(self.extra_inputs.iter().cloned()).collect()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![match self.output_kind {
            OutputKind::Exclusive => Output::exclusive::<O>(),
            OutputKind::Shared => Output::shared::<O>(),
        }]
    }

    async fn reconcile(&mut self, ctx: &mut Context) -> Result<(), ReconcileError> {
        let changed: Vec<Pointer> = ctx.changed().cloned().collect();
        let extra_changed = changed
            .iter()
            .any(|p| self.extra_inputs.iter().any(|i| i.type_name() == p.type_name && i.namespace == p.namespace));
        if ctx.is_full() || extra_changed {
            return self.full(ctx);
        }
        let mut ids = BTreeSet::new();
        for p in changed {
            if p.is::<I>(&self.input_namespace) {
                ids.insert(p.id);
            } else if p.is::<O>(&self.output_namespace)
                && let Some(input) = self.source_of.get(&p.id)
            {
                ids.insert(input.clone());
            }
        }
        for id in ids {
            let input = ctx.get::<I>(&self.input_namespace, &id)?;
            self.one(ctx, &id, input)?;
        }
        Ok(())
    }
}
