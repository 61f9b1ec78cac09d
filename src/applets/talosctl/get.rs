//! `talosctl get TYPE [ID]`: resources from the nodes' COSI `State` service.
//!
//! The type is resolved as Talos's talosctl resolves it: against the node's published
//! `ResourceDefinitions` (full name, plural, singular, alias or abbreviation), which also give
//! the default namespace and the table's extra columns. Tables, YAML and JSON as Talos prints
//! them; `-w` streams changes (`+` created, blank updated, `-` destroyed).

use std::process::ExitCode;

use super::Cli;
use super::output::{Errors, Table};
use crate::client::api::{Session, Target, status_line};
use crate::cosi::jsonpath::JsonPath;
use crate::proto::cosi::resource as wire;

const RESOURCE_DEFINITIONS: &str = "ResourceDefinitions.meta.cosi.dev";
const META: &str = "meta";

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// The resource type (any of its names; `rd` lists them all).
    resource_type: String,
    /// One resource's id.
    id: Option<String>,
    /// Namespace (default: the type's own).
    #[arg(long)]
    namespace: Option<String>,
    /// Output: table, yaml, json.
    #[arg(short = 'o', long, default_value = "table")]
    output: String,
    /// Keep watching for changes.
    #[arg(short = 'w', long)]
    watch: bool,
}

/// What the node says about a type.
struct TypeInfo {
    type_name: String,
    display: String,
    namespace: String,
    columns: Vec<(String, JsonPath)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Table,
    Yaml,
    Json,
}

pub fn run(cli: &Cli, args: &GetArgs) -> ExitCode {
    let format = match args.output.as_str() {
        "table" => Format::Table,
        "yaml" => Format::Yaml,
        "json" => Format::Json,
        other => {
            eprintln!("talosctl get: -o/--output: unknown format {other:?} (table, yaml, json)");
            return ExitCode::from(2);
        }
    };
    super::block_on(async move {
        let mut errors = Errors::new("get");
        let session = match Session::open(&cli.session()).await {
            Ok(s) => s,
            Err(e) => {
                errors.general(e);
                return errors.exit_code();
            }
        };
        let targets = session.targets();
        let info = match resolve(&session, &targets[0], &args.resource_type).await {
            Ok(info) => info,
            Err(e) => {
                errors.general(e);
                return errors.exit_code();
            }
        };
        let namespace = args.namespace.clone().unwrap_or_else(|| info.namespace.clone());
        let mut printer = Printer::new(format, &info, args.watch);
        if args.watch {
            let mut streams = futures::stream::SelectAll::new();
            for target in &targets {
                let label = target.label(&session).to_string();
                let request = wire::WatchRequest {
                    namespace: namespace.clone(),
                    r#type: info.type_name.clone(),
                    id: args.id.clone(),
                    options: Some(wire::WatchOptions { bootstrap_contents: true, ..Default::default() }),
                    api_version: 1,
                };
                match session.state().watch(session.request(target, request)).await {
                    Ok(stream) => {
                        streams.push(futures::StreamExt::map(stream.into_inner(), move |item| (label.clone(), item)))
                    }
                    Err(status) => errors.node(&label, status_line(&status)),
                }
            }
            while let Some((label, item)) = futures::StreamExt::next(&mut streams).await {
                match item {
                    Ok(response) => {
                        for event in response.event {
                            printer.event(&label, &event);
                        }
                    }
                    Err(status) => errors.node(&label, status_line(&status)),
                }
            }
            return errors.exit_code();
        }
        for target in &targets {
            let label = target.label(&session).to_string();
            match fetch(&session, target, &namespace, &info.type_name, args.id.as_deref()).await {
                Ok(resources) => {
                    for r in resources {
                        printer.resource(&label, &r, None);
                    }
                }
                Err(status) => errors.node(&label, status_line(&status)),
            }
        }
        printer.finish();
        errors.exit_code()
    })
}

async fn fetch(
    session: &Session,
    target: &Target,
    namespace: &str,
    type_name: &str,
    id: Option<&str>,
) -> Result<Vec<wire::Resource>, tonic::Status> {
    let mut state = session.state();
    if let Some(id) = id {
        let request = wire::GetRequest {
            namespace: namespace.to_string(),
            r#type: type_name.to_string(),
            id: id.to_string(),
            options: None,
        };
        let response = state.get(session.request(target, request)).await?.into_inner();
        return Ok(response.resource.into_iter().collect());
    }
    let request = wire::ListRequest { namespace: namespace.to_string(), r#type: type_name.to_string(), options: None };
    let mut stream = state.list(session.request(target, request)).await?.into_inner();
    let mut out = Vec::new();
    while let Some(item) = stream.message().await? {
        out.extend(item.resource);
    }
    Ok(out)
}

/// A spec's YAML as JSON (for columns and `-o json`).
fn spec_json(r: &wire::Resource) -> serde_json::Value {
    let yaml = r.spec.as_ref().map(|s| s.yaml_spec.as_str()).unwrap_or_default();
    if yaml.trim().is_empty() {
        return serde_json::Value::Null;
    }
    serde_saphyr::from_str::<serde_json::Value>(yaml).unwrap_or(serde_json::Value::Null)
}

async fn resolve(session: &Session, target: &Target, name: &str) -> Result<TypeInfo, String> {
    let label = target.label(session).to_string();
    let definitions = fetch(session, target, META, RESOURCE_DEFINITIONS, None)
        .await
        .map_err(|s| format!("{label}: listing resource definitions: {}", status_line(&s)))?;
    let specs: Vec<serde_json::Value> = definitions.iter().map(spec_json).collect();
    let names: Vec<(String, Vec<String>)> = specs
        .iter()
        .map(|s| {
            let t = s["type"].as_str().unwrap_or_default().to_string();
            let aliases = s["allAliases"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                .unwrap_or_default();
            (t, aliases)
        })
        .collect();
    let found = crate::cosi::registry::resolve(names.iter().map(|(t, a)| (t.as_str(), a.as_slice())), name)
        .map_err(|e| e.to_string())?
        .to_string();
    let spec = specs.iter().find(|s| s["type"].as_str() == Some(found.as_str())).cloned().unwrap_or_default();
    let columns = spec["printColumns"]
        .as_array()
        .map(|cols| {
            cols.iter()
                .filter_map(|c| {
                    let path = JsonPath::parse(c["jsonPath"].as_str()?).ok()?;
                    Some((c["name"].as_str()?.to_uppercase(), path))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(TypeInfo {
        display: spec["displayType"].as_str().unwrap_or(&found).to_string(),
        namespace: spec["defaultNamespace"].as_str().unwrap_or_default().to_string(),
        type_name: found,
        columns,
    })
}

fn time(t: &Option<prost_types::Timestamp>) -> String {
    t.as_ref()
        .and_then(|t| std::time::SystemTime::try_from(*t).ok())
        .map(crate::cosi::timestamp::format)
        .unwrap_or_default()
}

struct Printer<'a> {
    format: Format,
    info: &'a TypeInfo,
    watch: bool,
    table: Option<Table>,
    printed: usize,
}

impl<'a> Printer<'a> {
    fn new(format: Format, info: &'a TypeInfo, watch: bool) -> Self {
        Printer { format, info, watch, table: None, printed: 0 }
    }

    fn header(&self) -> Vec<String> {
        let mut h = vec!["NODE".to_string()];
        if self.watch {
            h.push("*".into());
        }
        h.extend(["NAMESPACE", "TYPE", "ID", "VERSION"].map(String::from));
        h.extend(self.info.columns.iter().map(|(n, _)| n.clone()));
        h
    }

    fn event(&mut self, node: &str, event: &wire::Event) {
        let mark = match wire::EventType::try_from(event.event_type) {
            Ok(wire::EventType::Created) => "+",
            Ok(wire::EventType::Updated) => " ",
            Ok(wire::EventType::Destroyed) => "-",
            Ok(wire::EventType::Errored) => {
                eprintln!("talosctl get: {node}: watch error: {}", event.error.clone().unwrap_or_default());
                return;
            }
            _ => return,
        };
        if let Some(r) = &event.resource {
            self.resource(node, r, Some(mark));
        }
    }

    fn resource(&mut self, node: &str, r: &wire::Resource, mark: Option<&str>) {
        let md = r.metadata.clone().unwrap_or_default();
        match self.format {
            Format::Table => {
                let spec = spec_json(r);
                let mut row = vec![node.to_string()];
                if let Some(mark) = mark {
                    row.push(mark.to_string());
                }
                row.extend([md.namespace, self.info.display.clone(), md.id, md.version]);
                row.extend(self.info.columns.iter().map(|(_, p)| p.render(&spec)));
                if self.watch {
                    // A stream: each row on its own, aligned to the header's widths only.
                    if self.printed == 0 {
                        println!("{}", self.header().join("   "));
                    }
                    println!("{}", row.join("   "));
                } else {
                    if self.table.is_none() {
                        self.table = Some(Table::new(self.header()));
                    }
                    if let Some(table) = &mut self.table {
                        table.row(row);
                    }
                }
            }
            Format::Yaml => {
                if self.printed > 0 {
                    println!("---");
                }
                print!("{}", yaml_of(node, &md, r, mark));
            }
            Format::Json => {
                let mut metadata = serde_json::json!({
                    "namespace": md.namespace, "type": md.r#type, "id": md.id, "version": md.version,
                    "owner": md.owner, "phase": md.phase, "created": time(&md.created), "updated": time(&md.updated),
                });
                if !md.labels.is_empty() {
                    metadata["labels"] = serde_json::json!(md.labels);
                }
                if !md.finalizers.is_empty() {
                    metadata["finalizers"] = serde_json::json!(md.finalizers);
                }
                let mut doc = serde_json::json!({ "node": node, "metadata": metadata, "spec": spec_json(r) });
                if let Some(mark) = mark {
                    doc["event"] = serde_json::json!(mark.trim());
                }
                println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
            }
        }
        self.printed += 1;
    }

    fn finish(&mut self) {
        if let Some(table) = &self.table {
            table.print();
        } else if self.format == Format::Table {
            Table::new(self.header()).print();
        }
    }
}

fn yaml_scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && !s.starts_with(|c: char| " -?:,[]{}#&*!|>'\"%@`".contains(c))
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.ends_with(' ')
        && !["true", "false", "null", "~", "yes", "no"].contains(&s)
        && s.parse::<f64>().is_err();
    if plain { s.to_string() } else { format!("{s:?}") }
}

fn yaml_of(node: &str, md: &wire::Metadata, r: &wire::Resource, mark: Option<&str>) -> String {
    let mut out = format!("node: {}\n", yaml_scalar(node));
    if let Some(mark) = mark {
        out.push_str(&format!("event: {}\n", yaml_scalar(mark.trim())));
    }
    out.push_str("metadata:\n");
    for (k, v) in [
        ("namespace", md.namespace.clone()),
        ("type", md.r#type.clone()),
        ("id", md.id.clone()),
        ("version", md.version.clone()),
        ("owner", md.owner.clone()),
        ("phase", md.phase.clone()),
        ("created", time(&md.created)),
        ("updated", time(&md.updated)),
    ] {
        out.push_str(&format!("    {k}: {}\n", if k == "version" { v } else { yaml_scalar(&v) }));
    }
    if !md.labels.is_empty() {
        out.push_str("    labels:\n");
        for (k, v) in &md.labels {
            out.push_str(&format!("        {}: {}\n", yaml_scalar(k), yaml_scalar(v)));
        }
    }
    if !md.finalizers.is_empty() {
        out.push_str("    finalizers:\n");
        for f in &md.finalizers {
            out.push_str(&format!("        - {}\n", yaml_scalar(f)));
        }
    }
    let spec = r.spec.as_ref().map(|s| s.yaml_spec.as_str()).unwrap_or_default();
    if spec.trim().is_empty() || spec.trim() == "{}" {
        out.push_str("spec: {}\n");
    } else if !spec.contains('\n') || spec.trim_end().lines().count() == 1 && !spec.contains(": ") {
        out.push_str(&format!("spec: {}\n", spec.trim()));
    } else {
        out.push_str("spec:\n");
        for line in spec.trim_end().lines() {
            if line.is_empty() {
                out.push('\n');
            } else {
                out.push_str(&format!("    {line}\n"));
            }
        }
    }
    out
}
