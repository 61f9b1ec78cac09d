//! The shape of the machine-config document kinds: which fields each has and what type each
//! field's value must be. The facts live in `schema_table.rs` (kept by hand); this file holds
//! the types of that table and the lookups over it. It says nothing about what talosbox does
//! with a field (that is `policy.rs`).

use super::schema_table::KINDS;
use super::value::{Path, Seg};

/// A field's wire type.
#[derive(Debug)]
pub(crate) enum Ty {
    Str,
    Int,
    Bool,
    /// A string from a fixed set.
    Enum(&'static [&'static str]),
    List(&'static Ty),
    /// String keys chosen by the user, each with a value of the given type.
    Map(&'static Ty),
    /// Fixed field names.
    Obj(&'static Obj),
    /// The first of these that fits.
    OneOf(&'static [Ty]),
    /// Free-form YAML, kept as written (Kubernetes manifests, OCI specs, ...).
    Any,
}

#[derive(Debug)]
pub(crate) struct Obj {
    /// Talos's name for the type, for reading the table.
    #[allow(dead_code)]
    pub name: &'static str,
    pub fields: &'static [Field],
}

impl Obj {
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

#[derive(Debug)]
pub(crate) struct Field {
    pub name: &'static str,
    pub ty: Ty,
}

/// One document kind.
#[derive(Debug)]
pub(crate) struct Kind {
    /// `v1alpha1` for the legacy document, else the `kind` value.
    pub kind: &'static str,
    /// Empty for the legacy document, which has `version` instead.
    pub api_version: &'static str,
    /// Whether documents of the kind carry a `name` (and so may appear more than once).
    pub named: bool,
    /// Talos's package for the kind (`network`, `block`, `k8s`, ...).
    pub group: &'static str,
    /// `Ty::Obj` of the kind's fields.
    pub root: Ty,
}

impl Kind {
    pub fn is_v1alpha1(&self) -> bool {
        self.api_version.is_empty()
    }
}

/// The legacy `v1alpha1` document.
pub(crate) fn v1alpha1() -> &'static Kind {
    &KINDS[0]
}

/// A multi-document kind by its `kind` and `apiVersion`.
pub(crate) fn kind(kind: &str, api_version: &str) -> Option<&'static Kind> {
    KINDS.iter().find(|k| !k.is_v1alpha1() && k.kind == kind && k.api_version == api_version)
}

#[cfg(test)]
pub(crate) fn all_kinds() -> &'static [Kind] {
    KINDS
}

/// The type at `path` below `root`, following the value's own shape through `OneOf`.
pub(crate) fn type_at(root: &'static Ty, path: &Path) -> Option<&'static Ty> {
    let mut here = root;
    for seg in path.segments() {
        here = step(here, seg)?;
    }
    Some(here)
}

/// The type one step below `ty`.
pub(crate) fn step(ty: &'static Ty, seg: &Seg) -> Option<&'static Ty> {
    match (ty, seg) {
        (Ty::Obj(o), Seg::Key(k)) => o.field(k).map(|f| &f.ty),
        (Ty::Map(t), Seg::Key(_)) | (Ty::List(t), Seg::Index(_)) => Some(t),
        (Ty::Any, _) => Some(&Ty::Any),
        (Ty::OneOf(options), seg) => options.iter().find_map(|t| step(t, seg)),
        _ => None,
    }
}

/// The type name used in error messages.
pub(crate) fn describe(ty: &Ty) -> String {
    match ty {
        Ty::Str | Ty::Enum(_) => "string".into(),
        Ty::Int => "integer".into(),
        Ty::Bool => "boolean".into(),
        Ty::List(_) => "list".into(),
        Ty::Map(_) | Ty::Obj(_) => "map".into(),
        Ty::OneOf(options) => options.iter().map(describe).collect::<Vec<_>>().join(" or "),
        Ty::Any => "any value".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_knows_every_kind_once() {
        let kinds = all_kinds();
        assert!(kinds.len() >= 90, "{}", kinds.len());
        assert!(v1alpha1().is_v1alpha1());
        let mut names: Vec<_> = kinds.iter().map(|k| k.kind).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), kinds.len(), "a kind appears twice");
        for name in ["LinkConfig", "UserVolumeConfig", "VolumeConfig", "HostnameConfig", "UnattendedInstallConfig"] {
            assert!(kind(name, "v1alpha1").is_some(), "{name}");
        }
        assert!(kind("LinkConfig", "v1alpha2").is_none());
    }

    #[test]
    fn paths_resolve_to_field_types() {
        let root = &v1alpha1().root;
        let mtu = Path::keys("machine.network.interfaces").index(3).key("mtu");
        assert!(matches!(type_at(root, &mtu), Some(Ty::Int)));
        let label = Path::keys("machine.nodeLabels").key("x");
        assert!(matches!(type_at(root, &label), Some(Ty::Str)));
        assert!(matches!(type_at(root, &Path::keys("machine.type")), Some(Ty::Str)));
        let fs = Path::keys("filesystem.type");
        let volume = kind("UserVolumeConfig", "v1alpha1").unwrap();
        assert!(matches!(type_at(&volume.root, &fs), Some(Ty::Enum(_))));
        assert!(type_at(root, &Path::keys("machine.nope")).is_none());
    }
}
