//! Talos's strategic merge of one document into another, on untyped values guided by the
//! schema: scalars are replaced, mappings merged key by key, lists appended, except the lists
//! Talos replaces outright and the lists it merges by a key field (network interfaces by name or
//! selector, VLANs by ID, ...). Pure value surgery; the result is checked again by the caller.

use super::ConfigError;
use super::policy::match_prefix;
use super::schema::{self, Kind, Ty};
use super::value::{Map, Path, Seg, Value};

/// Fields whose value a patch replaces instead of merging into (Talos's `merge:"replace"`).
const REPLACE: &[(&str, &str)] = &[
    ("v1alpha1", "cluster.apiServer.auditPolicy"),
    ("v1alpha1", "cluster.network.podSubnets"),
    ("v1alpha1", "cluster.network.serviceSubnets"),
    ("CRIBaseRuntimeSpecConfig", "overrides"),
    ("KubeAuditPolicyConfig", "configuration"),
    ("KubeAuthenticationConfig", "configuration"),
    ("KubeCredentialProviderConfig", "configuration"),
    ("KubeNetworkConfig", "podSubnets"),
    ("KubeNetworkConfig", "serviceSubnets"),
    ("KubeStaticPodConfig", "pod"),
    ("BGPInstanceConfig", "advertise"),
    ("BGPInstanceConfig", "importRoutes"),
    ("BGPInstanceConfig", "neighbors"),
    ("NetworkRuleConfig", "ingress"),
    ("NetworkRuleConfig", "portSelector.ports"),
];

/// How the items of a keyed list find their counterpart.
#[derive(Clone, Copy)]
enum Key {
    /// Items with the same value of this field are merged.
    Field(&'static str),
    /// Network devices: the same `interface`, else the same `deviceSelector`.
    Device,
    /// Items with the same value of this field replace the old item.
    ReplaceBy(&'static str),
}

const KEYED: &[(&str, &str, Key)] = &[
    ("v1alpha1", "machine.network.interfaces", Key::Device),
    ("v1alpha1", "machine.network.interfaces.*.vlans", Key::Field("vlanId")),
    ("v1alpha1", "cluster.apiServer.admissionControl", Key::Field("name")),
    ("ExtensionServiceConfig", "configFiles", Key::Field("mountPath")),
    ("ImageVerificationConfig", "rules", Key::ReplaceBy("image")),
];

fn rule<'a, T>(rules: &'a [(&str, &str, T)], kind: &Kind, path: &Path) -> Option<&'a T> {
    rules
        .iter()
        .find(|(k, p, _)| *k == kind.kind && match_prefix(p, path.segments()) == Some(path.len()))
        .map(|(_, _, t)| t)
}

fn replaced(kind: &Kind, path: &Path) -> bool {
    REPLACE.iter().any(|(k, p)| *k == kind.kind && match_prefix(p, path.segments()) == Some(path.len()))
}

/// Merges the patch document `right` into `left`, both of `kind`.
pub(crate) fn merge_document(kind: &'static Kind, left: &mut Value, right: &Value) -> Result<(), ConfigError> {
    let m = Merger { kind };
    m.merge(left, right, &kind.root, &Path::root())
}

struct Merger {
    kind: &'static Kind,
}

impl Merger {
    fn conflict(&self, path: &Path, left: &Value, right: &Value) -> ConfigError {
        ConfigError::Merge {
            doc: self.kind.kind.to_string(),
            path: path.to_string(),
            reason: format!("cannot merge a {} into a {}", right.type_name(), left.type_name()),
        }
    }

    fn merge(&self, left: &mut Value, right: &Value, ty: &'static Ty, path: &Path) -> Result<(), ConfigError> {
        if right.is_null() {
            return Ok(());
        }
        if left.is_null() || (!path.is_root() && replaced(self.kind, path)) {
            *left = right.clone();
            return Ok(());
        }
        match (left, right) {
            (Value::Map(l), Value::Map(r)) => self.merge_map(l, r, ty, path),
            (Value::List(l), Value::List(r)) => {
                let item_ty = match ty {
                    Ty::List(t) => t,
                    _ => &Ty::Any,
                };
                match rule(KEYED, self.kind, path) {
                    Some(key) => self.merge_keyed(l, r, *key, item_ty, path),
                    None => {
                        l.extend(r.iter().cloned());
                        Ok(())
                    }
                }
            }
            (l @ (Value::Map(_) | Value::List(_)), r) | (l, r @ (Value::Map(_) | Value::List(_))) => {
                Err(self.conflict(path, l, r))
            }
            (l, r) => {
                *l = r.clone();
                Ok(())
            }
        }
    }

    fn merge_map(&self, left: &mut Map, right: &Map, ty: &'static Ty, path: &Path) -> Result<(), ConfigError> {
        // Argument maps (strings or lists of strings per flag) take the patch's value per key.
        let per_key_replace = matches!(ty, Ty::Map(Ty::OneOf(_)));
        for (k, rv) in right.iter() {
            let here = path.key(k);
            let field_ty = schema::step(ty, &Seg::Key(k.to_string())).unwrap_or(&Ty::Any);
            match left.get_mut(k) {
                Some(lv) if !per_key_replace => self.merge(lv, rv, field_ty, &here)?,
                Some(lv) if !rv.is_null() => *lv = rv.clone(),
                Some(_) => {}
                None => {
                    left.insert(k, rv.clone());
                }
            }
        }
        Ok(())
    }

    fn merge_keyed(
        &self,
        left: &mut Vec<Value>,
        right: &[Value],
        key: Key,
        item_ty: &'static Ty,
        path: &Path,
    ) -> Result<(), ConfigError> {
        for item in right {
            let found = left.iter().position(|l| same_item(l, item, key));
            match (found, key) {
                (Some(i), Key::ReplaceBy(_)) => left[i] = item.clone(),
                (Some(i), _) => self.merge(&mut left[i], item, item_ty, &path.index(i))?,
                (None, _) => left.push(item.clone()),
            }
        }
        Ok(())
    }
}

fn same_item(left: &Value, right: &Value, key: Key) -> bool {
    let field = |v: &Value, f: &str| v.get(f).filter(|v| !v.is_null()).cloned();
    match key {
        Key::Field(f) | Key::ReplaceBy(f) => field(right, f).is_some_and(|r| field(left, f) == Some(r)),
        Key::Device => match field(right, "interface") {
            Some(Value::String(name)) if !name.is_empty() => field(left, "interface") == Some(Value::String(name)),
            _ => field(right, "deviceSelector").is_some_and(|sel| field(left, "deviceSelector") == Some(sel)),
        },
    }
}
