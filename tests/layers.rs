//! The layers of `src/`, checked: every reference a module makes to another top-level module
//! (`use crate::…`, an inline `crate::…` path, a `super::…` that climbs out of its module, or
//! `crate::…` inside a macro's tokens) must point down the table below, or sideways within one
//! layer, and never along a forbidden pair. A module `src/lib.rs` declares that the table does
//! not place is a failure too, so a new room cannot skip the check.
//!
//! This is the machine-checked form of the layer drawing in the architecture notes. It reads the
//! sources with `syn`; it never builds or runs them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Bottom first. A module may use modules of its own layer and of the layers below it.
const LAYERS: &[(&str, &[&str])] = &[
    // Wire types, primitive types and the adapters to the kernel, disks and certificates: they
    // know nothing of resources, controllers or the API.
    ("bottom", &["proto", "types", "kernel", "block", "pki", "panic", "version", "yaml", "hosttools"]),
    ("runtime", &["cosi"]),
    // Pure documents and decisions: the machine config, the boot layout.
    ("documents", &["config", "boot"]),
    // Typed resource specs: data, with no behaviour from above.
    ("resources", &["resources"]),
    // Protocol engines, platform sources and the process supervisor, which speak resources.
    ("engines", &["network", "platform", "services"]),
    ("controllers", &["controllers"]),
    ("api", &["api", "client"]),
    ("duties", &["machined", "operator", "provision", "imager"]),
    ("applets", &["applets", "main"]),
];

/// Pairs the layer order alone would allow but the design forbids: the servers behind apid
/// and the client side share wire types through `proto`, never each other, and both read the
/// state rather than calling controllers.
/// Effects and data stay apart too: the kernel's adapters and the resource specs share only
/// the primitive types below both.
const FORBIDDEN: &[(&str, &str)] = &[
    ("api", "client"),
    ("client", "api"),
    ("api", "controllers"),
    ("client", "controllers"),
    ("resources", "kernel"),
    ("kernel", "resources"),
];

#[derive(Debug, PartialEq, Eq)]
struct Arrow {
    file: String,
    line: usize,
    from: String,
    to: String,
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, mods)| mods.contains(&module))
}

/// Why `from → to` is not allowed, or `None` if it is.
fn broken(from: &str, to: &str) -> Option<String> {
    if from == to {
        return None;
    }
    let (f, t) = (layer_of(from)?, layer_of(to)?);
    if FORBIDDEN.contains(&(from, to)) {
        return Some(format!("{from} never imports {to}"));
    }
    (t > f).then(|| format!("{from} ({}) points up at {to} ({})", LAYERS[f].0, LAYERS[t].0))
}

/// The module path of a file under `src/`: `api/apid.rs` → `[api, apid]`, `api/mod.rs` → `[api]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs").to_string();
        if stem != "mod" {
            parts.push(stem);
        }
    }
    parts
}

struct Refs<'a> {
    /// The module the visitor is in: the file's path plus any inline `mod x { … }` it entered.
    module: Vec<String>,
    modules: &'a [String],
    found: Vec<(usize, String)>,
}

impl Refs<'_> {
    fn top(&self) -> &str {
        self.module.first().map(String::as_str).unwrap_or("main")
    }

    /// Records where a path starting with `first`, `second`… leads, if out of this module.
    fn path(&mut self, line: usize, segs: &[String]) {
        let target = match segs.first().map(String::as_str) {
            Some("crate") => segs.get(1).cloned(),
            Some("super") => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                if ups < self.module.len() {
                    // Still inside the file's own top-level module.
                    return;
                }
                // Climbed to the crate root: the next segment names a top-level module.
                segs.get(ups).cloned()
            }
            _ => None,
        };
        if let Some(t) = target
            && self.modules.contains(&t)
            && t != self.top()
        {
            self.found.push((line, t));
        }
    }

    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let mut prev: Vec<proc_macro2::TokenTree> = Vec::new();
        for tt in tokens {
            if let proc_macro2::TokenTree::Group(g) = &tt {
                self.tokens(g.stream());
            }
            // `crate :: name` (two `:` puncts between the idents).
            if let proc_macro2::TokenTree::Ident(name) = &tt
                && let [
                    ..,
                    proc_macro2::TokenTree::Ident(k),
                    proc_macro2::TokenTree::Punct(a),
                    proc_macro2::TokenTree::Punct(b),
                ] = prev.as_slice()
                && k == "crate"
                && a.as_char() == ':'
                && b.as_char() == ':'
            {
                let line = name.span().start().line;
                self.path(line, &["crate".into(), name.to_string()]);
            }
            prev.push(tt);
            if prev.len() > 3 {
                prev.remove(0);
            }
        }
    }
}

fn use_tree(refs: &mut Refs, prefix: &mut Vec<String>, tree: &syn::UseTree) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_tree(refs, prefix, &p.tree);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            prefix.push(n.ident.to_string());
            refs.path(n.ident.span().start().line, prefix);
            prefix.pop();
        }
        syn::UseTree::Rename(r) => {
            prefix.push(r.ident.to_string());
            refs.path(r.ident.span().start().line, prefix);
            prefix.pop();
        }
        syn::UseTree::Glob(g) => {
            prefix.push("*".into());
            refs.path(g.star_token.spans[0].start().line, prefix);
            prefix.pop();
        }
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_tree(refs, prefix, t);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Refs<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.module.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        use_tree(self, &mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = p.segments.first() {
            self.path(first.ident.span().start().line, &segs);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }
}

/// The arrows of one file's text, `rel` being its path under `src/`.
fn arrows_of(rel: &Path, text: &str, modules: &[String]) -> Result<Vec<Arrow>, String> {
    let file = syn::parse_file(text).map_err(|e| format!("{}: {e}", rel.display()))?;
    let mut refs = Refs { module: module_path(rel), modules, found: Vec::new() };
    refs.visit_file(&file);
    let from = refs.top().to_string();
    Ok(refs
        .found
        .into_iter()
        .map(|(line, to)| Arrow { file: rel.display().to_string(), line, from: from.clone(), to })
        .collect())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The top-level modules `src/lib.rs` declares.
fn declared_modules(lib: &str) -> Vec<String> {
    let file = syn::parse_file(lib).unwrap();
    file.items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Mod(m) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn every_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let unplaced: Vec<String> = declared_modules(&lib).into_iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(unplaced.is_empty(), "modules with no layer in tests/layers.rs: {unplaced:?}");
}

#[test]
fn arrows_point_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = declared_modules(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut breaks: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut seen = 0;
    for path in &files {
        let rel = path.strip_prefix(&src).unwrap();
        let text = std::fs::read_to_string(path).unwrap();
        for a in arrows_of(rel, &text, &modules).unwrap() {
            seen += 1;
            if let Some(why) = broken(&a.from, &a.to) {
                let at = format!("src/{}:{}", a.file, a.line);
                let sites = breaks.entry(why).or_default();
                if !sites.contains(&at) {
                    sites.push(at);
                }
            }
        }
    }
    // The reader must be seeing the crate's arrows at all, or passing means nothing.
    assert!(seen > 500, "only {seen} cross-module references found under src/");
    let report: Vec<String> = breaks.iter().map(|(why, at)| format!("{why}: {}", at.join(", "))).collect();
    assert!(report.is_empty(), "{} upward arrows:\n{}", report.len(), report.join("\n"));
}

#[test]
fn an_upward_import_is_caught_in_each_form() {
    let modules: Vec<String> = ["kernel", "cosi", "controllers", "api", "client", "resources"].map(String::from).into();
    // (file under src/, its text, the upward arrows it must report)
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        ("kernel/clock.rs", "use crate::controllers::x::Y;\n", &[("kernel", "controllers")]),
        ("kernel/clock.rs", "use crate::{cosi::Waker, kernel::uts};\n", &[("kernel", "cosi")]),
        ("kernel/clock.rs", "fn f() { crate::resources::x(); }\n", &[("kernel", "resources")]),
        ("kernel/clock.rs", "fn f() { println!(\"{}\", crate::cosi::X); }\n", &[("kernel", "cosi")]),
        // From `kernel::clock`, two `super`s climb to the crate root…
        ("kernel/clock.rs", "use super::super::api::X;\n", &[("kernel", "api")]),
        ("kernel/mod.rs", "use super::api::X;\n", &[("kernel", "api")]),
        // …but inside an inline module the same two stay home.
        ("kernel/clock.rs", "mod tests { use super::super::X; }\n", &[]),
        ("resources/network.rs", "use crate::kernel::netlink::X;\n", &[("resources", "kernel")]),
        ("api/apid.rs", "use crate::client::conn;\n", &[("api", "client")]),
        ("controllers/mod.rs", "use crate::kernel::x;\nuse crate::resources::y;\n", &[]),
    ];
    for (rel, text, want) in cases {
        let got: Vec<(String, String)> = arrows_of(Path::new(rel), text, &modules)
            .unwrap()
            .into_iter()
            .filter(|a| broken(&a.from, &a.to).is_some())
            .map(|a| (a.from, a.to))
            .collect();
        let want: Vec<(String, String)> = want.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        assert_eq!(got, want, "{rel}: {text}");
    }
    assert_eq!(broken("controllers", "kernel"), None);
    assert!(broken("client", "api").unwrap().contains("never imports"));
}
