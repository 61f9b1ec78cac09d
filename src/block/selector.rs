//! CEL expressions that pick disks and locate volumes, as Talos's volume configs carry them:
//! `provisioning.diskSelector.match` is evaluated over each Disk (with `system_disk`), and
//! `locator.match` over each DiscoveredVolume (with the `disk` it is on). An expression is
//! compiled and checked once, when the config is loaded: a syntax error, an undeclared name,
//! an unknown field, mismatched types or a result that is not a bool is rejected then, with
//! the problem named. It is evaluated for every disk or volume afterwards. This module never
//! reads a device or the resource state: the caller hands it the specs to match.
//!
//! The two environments are Talos's (`pkg/machinery/cel/celenv`): `DiskLocator` declares
//! `disk` (a `talos.resource.definitions.block.DiskSpec`), `system_disk` (bool) and
//! `glob(pattern, string)`; `VolumeLocator` declares `volume` (a `DiscoveredVolumeSpec`) and
//! `disk`. Both have the size constants (`KiB` … `EiB`, `kB` … `EB`, all uint) and CEL's
//! standard library with its defaults: no optional syntax, and no comparison across numeric
//! types, so a size is compared with uints (`disk.size > 10u * GiB`, never `> 10`).
//!
//! Where this differs from Talos: an expression whose type the checker cannot tell (`dyn`,
//! as `dyn(disk.size)`) is accepted and its result checked when evaluated, where Talos
//! refuses it; a constant regular expression is checked at compile time, not at evaluation;
//! timestamps and durations are refused; `has(disk.f)` is true for every field of the
//! message, where protobuf presence makes it false for a zero value; and `glob` does not
//! match when the text ends before the pattern's last part (see [`glob`]).

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{CelBool, CelString, STRING_TYPE};
use cel::common::value::CowVal;
use cel::objects::{Key, Map};
use cel::{ExecutionError, Value};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The set of names an expression is compiled against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Env {
    /// A disk selector, evaluated over each disk: `disk`, `system_disk`, `glob()`.
    DiskLocator,
    /// A volume locator, evaluated over each discovered volume: `volume`, `disk`.
    VolumeLocator,
}

impl fmt::Display for Env {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Env::DiskLocator => "DiskLocator",
            Env::VolumeLocator => "VolumeLocator",
        })
    }
}

impl Env {
    /// The type of a name declared in this environment.
    fn variable(self, name: &str) -> Option<Ty> {
        match (self, name) {
            (_, "disk") => Some(Ty::Message(Message::Disk)),
            (Env::DiskLocator, "system_disk") => Some(Ty::Bool),
            (Env::VolumeLocator, "volume") => Some(Ty::Message(Message::Volume)),
            _ if SIZE_UNITS.iter().any(|(unit, _)| *unit == name) => Some(Ty::Uint),
            _ => None,
        }
    }
}

/// Talos's size multipliers, declared as uint constants in both environments.
pub const SIZE_UNITS: [(&str, u64); 12] = [
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("PiB", 1 << 50),
    ("EiB", 1 << 60),
    ("kB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("PB", 1_000_000_000_000_000),
    ("EB", 1_000_000_000_000_000_000),
];

/// Where in an expression's source a problem is, both counted from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("CEL expression {expression:?}: syntax error: {message}")]
    Syntax { expression: String, message: String },
    #[error(
        "CEL expression {expression:?}: undeclared reference to '{name}' at {position} (not in the {env} environment)"
    )]
    Undeclared { expression: String, name: String, position: Position, env: Env },
    #[error("CEL expression {expression:?}: undefined field '{field}' of {message} at {position}")]
    UndefinedField { expression: String, message: &'static str, field: String, position: Position },
    #[error("CEL expression {expression:?}: {problem} at {position}")]
    Type { expression: String, problem: String, position: Position },
    #[error("CEL expression {expression:?}: expression output type is {got}, expected bool")]
    OutputType { expression: String, got: String },
    #[error("the {variable} to match: {problem}")]
    Variable { variable: &'static str, problem: String },
    #[error("CEL expression {expression:?}: `{variable}` is not known for this evaluation")]
    Unset { expression: String, variable: String },
    #[error("evaluating CEL expression {expression:?}: {message}")]
    Evaluation { expression: String, message: String },
    #[error("CEL expression {expression:?} evaluated to a {got}, expected bool")]
    NotBool { expression: String, got: &'static str },
    #[error("setting up the {env} CEL environment: {message}")]
    Environment { env: Env, message: String },
}

/// A boolean CEL expression, compiled and checked for one [`Env`].
#[derive(Clone)]
pub struct Expression {
    env: Env,
    source: String,
    program: Arc<cel::Program>,
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Expression").field("env", &self.env).field("source", &self.source).finish()
    }
}

impl PartialEq for Expression {
    fn eq(&self, other: &Self) -> bool {
        self.env == other.env && self.source == other.source
    }
}

impl Eq for Expression {}

impl fmt::Display for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl Serialize for Expression {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.source)
    }
}

impl Expression {
    /// Parses and checks `source` for `env`; it must be of type bool.
    pub fn compile(source: &str, env: Env) -> Result<Expression, SelectorError> {
        let program = cel_env(env)?.compile(source).map_err(|errors| {
            let message = errors
                .errors
                .iter()
                .map(|e| format!("{}:{}: {}", e.pos.0, e.pos.1, e.msg))
                .collect::<Vec<_>>()
                .join("; ");
            SelectorError::Syntax { expression: source.to_owned(), message }
        })?;
        let mut checker = Checker { env, scopes: Vec::new() };
        let ty = checker.expr(program.expression()).map_err(|e| e.into_error(env, source, &program))?;
        if !matches!(ty, Ty::Bool | Ty::Dyn) {
            return Err(SelectorError::OutputType { expression: source.to_owned(), got: ty.to_string() });
        }
        Ok(Expression { env, source: source.to_owned(), program: Arc::new(program) })
    }

    /// The source text, as written in the config.
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn env(&self) -> Env {
        self.env
    }

    /// Evaluates the expression over `vars`. A variable the evaluation reaches but `vars`
    /// lacks (say `system_disk` before the system disk is known) is an error, as in Talos.
    pub fn matches(&self, vars: &Vars) -> Result<bool, SelectorError> {
        let mut context = cel::Context::with_env(cel_env(self.env)?);
        for (unit, multiplier) in SIZE_UNITS {
            context.add_variable_from_value(unit, Value::UInt(multiplier));
        }
        if let Some(disk) = &vars.disk {
            context.add_variable_from_value("disk", disk.clone());
        }
        match self.env {
            Env::DiskLocator => {
                if let Some(system_disk) = vars.system_disk {
                    context.add_variable_from_value("system_disk", system_disk);
                }
            }
            Env::VolumeLocator => {
                if let Some(volume) = &vars.volume {
                    context.add_variable_from_value("volume", volume.clone());
                }
            }
        }
        match self.program.execute(&context) {
            Ok(Value::Bool(matched)) => Ok(matched),
            Ok(other) => Err(SelectorError::NotBool { expression: self.source.clone(), got: value_type(&other) }),
            Err(ExecutionError::UndeclaredReference(name)) if self.env.variable(&name).is_some() => {
                Err(SelectorError::Unset { expression: self.source.clone(), variable: name.to_string() })
            }
            Err(error) => {
                Err(SelectorError::Evaluation { expression: self.source.clone(), message: error.to_string() })
            }
        }
    }
}

macro_rules! env_expression {
    ($(#[$doc:meta])* $name:ident, $env:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name(Expression);

        impl $name {
            pub fn expression(&self) -> &Expression {
                &self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = Expression;

            fn deref(&self) -> &Expression {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = SelectorError;

            fn try_from(source: &str) -> Result<Self, SelectorError> {
                Expression::compile(source, $env).map($name)
            }
        }

        impl FromStr for $name {
            type Err = SelectorError;

            fn from_str(source: &str) -> Result<Self, SelectorError> {
                Self::try_from(source)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                self.0.serialize(serializer)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let source = String::deserialize(deserializer)?;
                Self::try_from(source.as_str()).map_err(serde::de::Error::custom)
            }
        }
    };
}

env_expression!(
    /// An expression compiled for [`Env::DiskLocator`]: a `diskSelector.match` or a
    /// `locator.diskMatch`. Deserializes from its source text, compiling it.
    DiskExpression,
    Env::DiskLocator
);

env_expression!(
    /// An expression compiled for [`Env::VolumeLocator`]: a `locator.match`.
    /// Deserializes from its source text, compiling it.
    VolumeExpression,
    Env::VolumeLocator
);

/// The values one evaluation sees. A spec is given as anything serde serializes to a map with
/// Talos's snake_case field names; a field it lacks, or has as null, reads as its protobuf zero
/// value (`0u`, `false`, `""`, `[]`), as an unset field does in Talos.
#[derive(Clone, Debug, Default)]
pub struct Vars {
    disk: Option<Value>,
    volume: Option<Value>,
    system_disk: Option<bool>,
}

impl Vars {
    pub fn new() -> Vars {
        Vars::default()
    }

    /// `disk`: a DiskSpec.
    pub fn with_disk<T: Serialize + ?Sized>(mut self, spec: &T) -> Result<Vars, SelectorError> {
        self.disk = Some(spec_value(Message::Disk, spec)?);
        Ok(self)
    }

    /// `volume`: a DiscoveredVolumeSpec.
    pub fn with_volume<T: Serialize + ?Sized>(mut self, spec: &T) -> Result<Vars, SelectorError> {
        self.volume = Some(spec_value(Message::Volume, spec)?);
        Ok(self)
    }

    /// `system_disk`: whether the disk is the one the system booted from.
    pub fn with_system_disk(mut self, system_disk: bool) -> Vars {
        self.system_disk = Some(system_disk);
        self
    }
}

/// The two message types the expressions see, with the fields of Talos's protobuf
/// definitions (`api/resource/definitions/block/block.proto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Message {
    Disk,
    Volume,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Uint,
    Bool,
    String,
    Strings,
}

const DISK_FIELDS: &[(&str, Field)] = &[
    ("size", Field::Uint),
    ("io_size", Field::Uint),
    ("sector_size", Field::Uint),
    ("readonly", Field::Bool),
    ("model", Field::String),
    ("serial", Field::String),
    ("modalias", Field::String),
    ("wwid", Field::String),
    ("bus_path", Field::String),
    ("sub_system", Field::String),
    ("transport", Field::String),
    ("rotational", Field::Bool),
    ("cdrom", Field::Bool),
    ("dev_path", Field::String),
    ("pretty_size", Field::String),
    ("secondary_disks", Field::Strings),
    ("uuid", Field::String),
    ("symlinks", Field::Strings),
    ("firmware_version", Field::String),
];

// block_size and filesystem_block_size are uint32 in the protobuf: CEL sees them as uint too.
const VOLUME_FIELDS: &[(&str, Field)] = &[
    ("size", Field::Uint),
    ("sector_size", Field::Uint),
    ("io_size", Field::Uint),
    ("name", Field::String),
    ("uuid", Field::String),
    ("label", Field::String),
    ("block_size", Field::Uint),
    ("filesystem_block_size", Field::Uint),
    ("probed_size", Field::Uint),
    ("partition_uuid", Field::String),
    ("partition_type", Field::String),
    ("partition_label", Field::String),
    ("partition_index", Field::Uint),
    ("type", Field::String),
    ("device_path", Field::String),
    ("parent", Field::String),
    ("dev_path", Field::String),
    ("parent_dev_path", Field::String),
    ("pretty_size", Field::String),
    ("offset", Field::Uint),
];

impl Message {
    fn name(self) -> &'static str {
        match self {
            Message::Disk => "talos.resource.definitions.block.DiskSpec",
            Message::Volume => "talos.resource.definitions.block.DiscoveredVolumeSpec",
        }
    }

    fn variable(self) -> &'static str {
        match self {
            Message::Disk => "disk",
            Message::Volume => "volume",
        }
    }

    fn fields(self) -> &'static [(&'static str, Field)] {
        match self {
            Message::Disk => DISK_FIELDS,
            Message::Volume => VOLUME_FIELDS,
        }
    }

    fn field(self, name: &str) -> Option<Field> {
        self.fields().iter().find(|(field, _)| *field == name).map(|(_, kind)| *kind)
    }
}

impl Field {
    fn ty(self) -> Ty {
        match self {
            Field::Uint => Ty::Uint,
            Field::Bool => Ty::Bool,
            Field::String => Ty::String,
            Field::Strings => Ty::List(Box::new(Ty::String)),
        }
    }

    fn zero(self) -> Value {
        match self {
            Field::Uint => Value::UInt(0),
            Field::Bool => Value::Bool(false),
            Field::String => Value::from(""),
            Field::Strings => Value::List(Arc::new(Vec::new())),
        }
    }

    /// `value` as this field's CEL type; `None` when it is not one.
    fn coerce(self, value: &Value) -> Option<Value> {
        match (self, value) {
            (_, Value::Null) => Some(self.zero()),
            (Field::Uint, Value::UInt(_)) | (Field::Bool, Value::Bool(_)) => Some(value.clone()),
            (Field::Uint, Value::Int(i)) => u64::try_from(*i).ok().map(Value::UInt),
            (Field::String, Value::String(_)) => Some(value.clone()),
            (Field::Strings, Value::List(items)) => {
                items.iter().all(|item| matches!(item, Value::String(_))).then(|| value.clone())
            }
            _ => None,
        }
    }
}

/// A spec as the map of exactly its message's fields, each of its CEL type.
fn spec_value<T: Serialize + ?Sized>(message: Message, spec: &T) -> Result<Value, SelectorError> {
    let variable = message.variable();
    let value = cel::to_value(spec).map_err(|e| SelectorError::Variable { variable, problem: e.to_string() })?;
    let Value::Map(map) = value else {
        return Err(SelectorError::Variable {
            variable,
            problem: format!("a {} is not a map of fields", value_type(&value)),
        });
    };
    let mut fields = std::collections::HashMap::with_capacity(message.fields().len());
    for (name, kind) in message.fields() {
        let key = Key::from(name.to_string());
        let value = match map.map.get(&key) {
            None => kind.zero(),
            Some(value) => kind.coerce(value).ok_or_else(|| SelectorError::Variable {
                variable,
                problem: format!("field `{name}` is a {}, expected {}", value_type(value), kind.ty()),
            })?,
        };
        fields.insert(key, value);
    }
    Ok(Value::Map(Map { map: Arc::new(fields) }))
}

/// The CEL name of a value's type, as in the errors of Talos's CEL library.
fn value_type(value: &Value) -> &'static str {
    match value {
        Value::List(_) => "list",
        Value::Map(_) => "map",
        Value::Function(..) => "function",
        Value::Int(_) => "int",
        Value::UInt(_) => "uint",
        Value::Float(_) => "double",
        Value::String(_) => "string",
        Value::Bytes(_) => "bytes",
        Value::Bool(_) => "bool",
        Value::Opaque(_) => "opaque",
        Value::Struct(_) => "struct",
        Value::Null => "null_type",
    }
}

static DISK_ENV: LazyLock<Result<Arc<cel::Env>, String>> = LazyLock::new(|| build_env(true));
static VOLUME_ENV: LazyLock<Result<Arc<cel::Env>, String>> = LazyLock::new(|| build_env(false));

fn cel_env(env: Env) -> Result<Arc<cel::Env>, SelectorError> {
    let built = match env {
        Env::DiskLocator => &*DISK_ENV,
        Env::VolumeLocator => &*VOLUME_ENV,
    };
    built.clone().map_err(|message| SelectorError::Environment { env, message })
}

/// CEL's standard library without optional syntax; `matches` on this package's regex crate
/// (the cel crate's own regex feature would pull in all of regex's features), and `glob` for
/// disk selectors.
fn build_env(with_glob: bool) -> Result<Arc<cel::Env>, String> {
    let mut env = cel::Env::stdlib().with_optional_support(false);
    let declare = |result: Result<(), cel::DeclarationError>| result.map_err(|e| e.to_string());
    declare(env.add_overload("matches", "matches", vec![STRING_TYPE, STRING_TYPE], cel_matches))?;
    declare(env.add_member_overload("matches", "matches_string", STRING_TYPE, vec![STRING_TYPE], cel_matches))?;
    if with_glob {
        declare(env.add_overload("glob", "glob_string_string", vec![STRING_TYPE, STRING_TYPE], cel_glob))?;
    }
    Ok(Arc::new(env))
}

fn two_strings<'a>(function: &str, args: &'a [CowVal<'_, '_>]) -> Result<(&'a str, &'a str), ExecutionError> {
    match args {
        [a, b] => match (a.downcast_ref::<CelString>(), b.downcast_ref::<CelString>()) {
            (Some(a), Some(b)) => Ok((a.inner(), b.inner())),
            _ => Err(ExecutionError::no_such_overload(
                function,
                vec![a.get_type().name().to_owned(), b.get_type().name().to_owned()],
            )),
        },
        _ => Err(ExecutionError::invalid_argument_count(2, args.len())),
    }
}

/// `matches(text, re)` and `text.matches(re)`: whether `re` matches anywhere in `text`.
fn cel_matches<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (text, pattern) = two_strings("matches", &args)?;
    let re = regex::Regex::new(pattern)
        .map_err(|e| ExecutionError::function_error("matches", format!("invalid regular expression: {e}")))?;
    Ok(CowVal::owned(CelBool::from(re.is_match(text))))
}

/// `glob(pattern, text)`.
fn cel_glob<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (pattern, text) = two_strings("glob", &args)?;
    Ok(CowVal::owned(CelBool::from(glob(pattern, text))))
}

/// Talos's glob: `*` stands for any run of characters, `/` included, and every other
/// character, `?` and `[` too, for itself; the whole of `text` must match. (Talos's library
/// also matches when `text` runs out before the pattern's last part, `a*b` matching `a`;
/// that is not carried over.)
pub fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    // The leftmost match of each middle part leaves the most text for the ones after it.
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The static type of an expression, as far as this checker follows CEL's: `Dyn` where it
/// cannot tell, which the evaluation then checks.
#[derive(Clone, Debug, PartialEq)]
enum Ty {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    List(Box<Ty>),
    Map(Box<Ty>, Box<Ty>),
    Message(Message),
    Type,
    Dyn,
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Bool => f.write_str("bool"),
            Ty::Int => f.write_str("int"),
            Ty::Uint => f.write_str("uint"),
            Ty::Double => f.write_str("double"),
            Ty::String => f.write_str("string"),
            Ty::Bytes => f.write_str("bytes"),
            Ty::Null => f.write_str("null_type"),
            Ty::List(elem) => write!(f, "list({elem})"),
            Ty::Map(key, value) => write!(f, "map({key}, {value})"),
            Ty::Message(m) => f.write_str(m.name()),
            Ty::Type => f.write_str("type"),
            Ty::Dyn => f.write_str("dyn"),
        }
    }
}

impl Ty {
    fn is(&self, want: &Ty) -> bool {
        self == want || *self == Ty::Dyn
    }

    fn is_numeric(&self) -> bool {
        matches!(self, Ty::Int | Ty::Uint | Ty::Double)
    }

    fn is_ordered(&self) -> bool {
        matches!(self, Ty::Bool | Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Bytes)
    }
}

/// Whether values of `a` and `b` may be compared for equality: the same type, since CEL's
/// `_==_` takes two arguments of one type.
fn compatible(a: &Ty, b: &Ty) -> bool {
    match (a, b) {
        (Ty::Dyn, _) | (_, Ty::Dyn) => true,
        (Ty::List(a), Ty::List(b)) => compatible(a, b),
        (Ty::Map(ka, va), Ty::Map(kb, vb)) => compatible(ka, kb) && compatible(va, vb),
        (Ty::Null, Ty::Message(_)) | (Ty::Message(_), Ty::Null) => true,
        _ => a == b,
    }
}

fn join(a: &Ty, b: &Ty) -> Ty {
    match (a, b) {
        _ if a == b => a.clone(),
        (Ty::List(a), Ty::List(b)) => Ty::List(Box::new(join(a, b))),
        (Ty::Map(ka, va), Ty::Map(kb, vb)) => Ty::Map(Box::new(join(ka, kb)), Box::new(join(va, vb))),
        _ => Ty::Dyn,
    }
}

enum CheckProblem {
    Undeclared(String),
    UndefinedField(Message, String),
    Type(String),
}

struct CheckError {
    id: u64,
    problem: CheckProblem,
}

impl CheckError {
    fn into_error(self, env: Env, source: &str, program: &cel::Program) -> SelectorError {
        let position = program
            .source_info()
            .offset_for(self.id)
            .map(|(start, _)| position(source, start as usize))
            .unwrap_or(Position { line: 1, column: 1 });
        let expression = source.to_owned();
        match self.problem {
            CheckProblem::Undeclared(name) => SelectorError::Undeclared { expression, name, position, env },
            CheckProblem::UndefinedField(message, field) => {
                SelectorError::UndefinedField { expression, message: message.name(), field, position }
            }
            CheckProblem::Type(problem) => SelectorError::Type { expression, problem, position },
        }
    }
}

/// The line and column of the `offset`th character of `source`.
fn position(source: &str, offset: usize) -> Position {
    let mut line = 1;
    let mut column = 1;
    for c in source.chars().take(offset) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    Position { line, column }
}

/// The part of CEL's type checker that config loading needs: every name declared, every
/// field known, every operator and function applied to types it has an overload for (as
/// cel-go declares them: no cross-type numeric comparisons), and the result's type.
struct Checker {
    env: Env,
    /// Comprehension variables, innermost last.
    scopes: Vec<(String, Ty)>,
}

type Checked = Result<Ty, CheckError>;

fn type_error(id: u64, problem: String) -> CheckError {
    CheckError { id, problem: CheckProblem::Type(problem) }
}

fn no_overload(id: u64, function: &str, target: Option<&Ty>, args: &[Ty]) -> CheckError {
    let args = args.iter().map(Ty::to_string).collect::<Vec<_>>().join(", ");
    let applied = match target {
        Some(target) => format!("{target}.({args})"),
        None => format!("({args})"),
    };
    type_error(id, format!("found no matching overload for '{function}' applied to '{applied}'"))
}

impl Checker {
    fn ident(&self, name: &str) -> Option<Ty> {
        if let Some((_, ty)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
            return Some(ty.clone());
        }
        if let Some(ty) = self.env.variable(name) {
            return Some(ty);
        }
        const TYPE_NAMES: [&str; 11] =
            ["bool", "int", "uint", "double", "string", "bytes", "list", "map", "null_type", "type", "dyn"];
        TYPE_NAMES.contains(&name).then_some(Ty::Type)
    }

    fn expr(&mut self, e: &IdedExpr) -> Checked {
        match &e.expr {
            Expr::Literal(literal) => Ok(match literal {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::Null => Ty::Null,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::UInt(_) => Ty::Uint,
            }),
            Expr::Ident(name) => {
                self.ident(name).ok_or_else(|| CheckError { id: e.id, problem: CheckProblem::Undeclared(name.clone()) })
            }
            Expr::Select(select) => {
                let operand = self.expr(&select.operand)?;
                match &operand {
                    Ty::Message(message) => match message.field(&select.field) {
                        Some(_) if select.test => Ok(Ty::Bool),
                        Some(field) => Ok(field.ty()),
                        None => Err(CheckError {
                            id: e.id,
                            problem: CheckProblem::UndefinedField(*message, select.field.clone()),
                        }),
                    },
                    Ty::Map(..) | Ty::Dyn if select.test => Ok(Ty::Bool),
                    Ty::Map(_, value) => Ok((**value).clone()),
                    Ty::Dyn => Ok(Ty::Dyn),
                    other => Err(type_error(e.id, format!("type '{other}' does not support field selection"))),
                }
            }
            Expr::Call(call) => {
                let target = match &call.target {
                    Some(target) => Some(self.expr(target)?),
                    None => None,
                };
                let mut args = Vec::with_capacity(call.args.len());
                for arg in &call.args {
                    args.push(self.expr(arg)?);
                }
                self.call(e.id, &call.func_name, target.as_ref(), &args, &call.args)
            }
            Expr::List(list) => {
                let mut elem: Option<Ty> = None;
                for element in &list.elements {
                    let ty = self.expr(element)?;
                    elem = Some(match elem {
                        None => ty,
                        Some(elem) => join(&elem, &ty),
                    });
                }
                Ok(Ty::List(Box::new(elem.unwrap_or(Ty::Dyn))))
            }
            Expr::Map(map) => {
                let mut types: Option<(Ty, Ty)> = None;
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        let key = self.expr(&entry.key)?;
                        let value = self.expr(&entry.value)?;
                        types = Some(match types {
                            None => (key, value),
                            Some((k, v)) => (join(&k, &key), join(&v, &value)),
                        });
                    }
                }
                let (key, value) = types.unwrap_or((Ty::Dyn, Ty::Dyn));
                Ok(Ty::Map(Box::new(key), Box::new(value)))
            }
            Expr::Struct(s) => Err(type_error(e.id, format!("creating a message ({}) is not supported", s.type_name))),
            Expr::Comprehension(c) => {
                let range = self.expr(&c.iter_range)?;
                let elem = match range {
                    Ty::List(elem) => *elem,
                    Ty::Map(key, _) => *key,
                    Ty::Dyn => Ty::Dyn,
                    other => {
                        return Err(type_error(
                            c.iter_range.id,
                            format!(
                                "expression of type '{other}' cannot be the range of a comprehension (must be list, map, or dynamic)"
                            ),
                        ));
                    }
                };
                let accu = self.expr(&c.accu_init)?;
                self.scopes.push((c.accu_var.clone(), accu));
                self.scopes.push((c.iter_var.clone(), elem));
                if let Some(var2) = &c.iter_var2 {
                    self.scopes.push((var2.clone(), Ty::Dyn));
                }
                let cond = self.expr(&c.loop_cond)?;
                if !cond.is(&Ty::Bool) {
                    return Err(type_error(
                        c.loop_cond.id,
                        format!("comprehension condition is {cond}, expected bool"),
                    ));
                }
                self.expr(&c.loop_step)?;
                self.scopes.pop();
                if c.iter_var2.is_some() {
                    self.scopes.pop();
                }
                let result = self.expr(&c.result)?;
                self.scopes.pop();
                Ok(result)
            }
            Expr::Unspecified => Err(type_error(e.id, "empty expression".to_owned())),
        }
    }

    fn call(&self, id: u64, function: &str, target: Option<&Ty>, args: &[Ty], arg_exprs: &[IdedExpr]) -> Checked {
        let none = || no_overload(id, function, target, args);
        let s = &Ty::String;
        match (function, target, args) {
            ("_&&_" | "_||_", None, [a, b]) if a.is(&Ty::Bool) && b.is(&Ty::Bool) => Ok(Ty::Bool),
            ("!_" | "@not_strictly_false", None, [a]) if a.is(&Ty::Bool) => Ok(Ty::Bool),
            ("_==_" | "_!=_", None, [a, b]) if compatible(a, b) => Ok(Ty::Bool),
            ("_<_" | "_<=_" | "_>_" | "_>=_", None, [a, b])
                if (a == b && a.is_ordered())
                    || (*a == Ty::Dyn && (b.is_ordered() || *b == Ty::Dyn))
                    || (*b == Ty::Dyn && a.is_ordered()) =>
            {
                Ok(Ty::Bool)
            }
            ("_+_", None, [a, b]) => match (a, b) {
                (Ty::List(_), Ty::List(_)) => Ok(join(a, b)),
                _ if a == b && (a.is_numeric() || matches!(a, Ty::String | Ty::Bytes)) => Ok(a.clone()),
                (Ty::Dyn, Ty::Dyn) => Ok(Ty::Dyn),
                (Ty::Dyn, other) | (other, Ty::Dyn)
                    if other.is_numeric() || matches!(other, Ty::String | Ty::Bytes | Ty::List(_)) =>
                {
                    Ok(other.clone())
                }
                _ => Err(none()),
            },
            ("_-_" | "_*_" | "_/_" | "_%_", None, [a, b]) => {
                let allowed = |t: &Ty| matches!(t, Ty::Int | Ty::Uint) || (function != "_%_" && *t == Ty::Double);
                match (a, b) {
                    _ if a == b && allowed(a) => Ok(a.clone()),
                    (Ty::Dyn, Ty::Dyn) => Ok(Ty::Dyn),
                    (Ty::Dyn, other) | (other, Ty::Dyn) if allowed(other) => Ok(other.clone()),
                    _ => Err(none()),
                }
            }
            ("-_", None, [a]) if matches!(a, Ty::Int | Ty::Double | Ty::Dyn) => Ok(a.clone()),
            ("_?_:_", None, [cond, a, b]) if cond.is(&Ty::Bool) && compatible(a, b) => Ok(join(a, b)),
            ("_[_]", None, [Ty::List(elem), index]) if index.is(&Ty::Int) => Ok((**elem).clone()),
            ("_[_]", None, [Ty::Map(key, value), index]) if compatible(key, index) => Ok((**value).clone()),
            ("_[_]", None, [Ty::Dyn, _]) => Ok(Ty::Dyn),
            ("@in", None, [a, Ty::List(elem)]) if compatible(a, elem) => Ok(Ty::Bool),
            ("@in", None, [a, Ty::Map(key, _)]) if compatible(a, key) => Ok(Ty::Bool),
            ("@in", None, [_, Ty::Dyn]) => Ok(Ty::Bool),
            ("size", None, [a]) | ("size", Some(a), [])
                if matches!(a, Ty::String | Ty::Bytes | Ty::List(_) | Ty::Map(..) | Ty::Dyn) =>
            {
                Ok(Ty::Int)
            }
            ("contains" | "startsWith" | "endsWith", Some(a), [b]) if a.is(s) && b.is(s) => Ok(Ty::Bool),
            ("matches", Some(a), [b]) | ("matches", None, [a, b]) if a.is(s) && b.is(s) => {
                // A constant pattern is checked now rather than on every evaluation.
                if let Some(IdedExpr { id, expr: Expr::Literal(LiteralValue::String(pattern)) }) = arg_exprs.last()
                    && let Err(e) = regex::Regex::new(pattern.inner())
                {
                    return Err(type_error(*id, format!("invalid regular expression: {e}")));
                }
                Ok(Ty::Bool)
            }
            ("glob", None, [a, b]) if self.env == Env::DiskLocator && a.is(s) && b.is(s) => Ok(Ty::Bool),
            ("int", None, [Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Dyn]) => Ok(Ty::Int),
            ("uint", None, [Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Dyn]) => Ok(Ty::Uint),
            ("double", None, [Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Dyn]) => Ok(Ty::Double),
            ("string", None, [Ty::String | Ty::Bool | Ty::Bytes | Ty::Double | Ty::Int | Ty::Uint | Ty::Dyn]) => {
                Ok(Ty::String)
            }
            ("bytes", None, [Ty::Bytes | Ty::String | Ty::Dyn]) => Ok(Ty::Bytes),
            ("bool", None, [Ty::Bool | Ty::String | Ty::Dyn]) => Ok(Ty::Bool),
            ("dyn", None, [_]) => Ok(Ty::Dyn),
            ("type", None, [_]) => Ok(Ty::Type),
            (
                "timestamp" | "duration" | "getFullYear" | "getMonth" | "getDayOfYear" | "getDayOfMonth" | "getDate"
                | "getDayOfWeek" | "getHours" | "getMinutes" | "getSeconds" | "getMilliseconds",
                _,
                _,
            ) => Err(type_error(id, format!("'{function}': timestamps and durations are not supported"))),
            (
                "_&&_"
                | "_||_"
                | "!_"
                | "@not_strictly_false"
                | "_==_"
                | "_!=_"
                | "_<_"
                | "_<=_"
                | "_>_"
                | "_>=_"
                | "-_"
                | "_?_:_"
                | "_[_]"
                | "@in"
                | "size"
                | "contains"
                | "startsWith"
                | "endsWith"
                | "matches"
                | "int"
                | "uint"
                | "double"
                | "string"
                | "bytes"
                | "bool"
                | "dyn"
                | "type",
                _,
                _,
            ) => Err(none()),
            ("glob", _, _) if self.env == Env::DiskLocator => Err(none()),
            _ => Err(CheckError { id, problem: CheckProblem::Undeclared(function.to_owned()) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GB: u64 = 1_000_000_000;
    const GIB: u64 = 1 << 30;

    /// Disks as `talosctl get disks -o yaml` shows them; the virtio one has no serial, wwid
    /// or symlinks at all.
    fn disks() -> Vec<serde_json::Value> {
        vec![
            json!({
                "dev_path": "/dev/nvme0n1", "size": 10_485_760_000u64, "pretty_size": "10 GB",
                "io_size": 512, "sector_size": 512, "readonly": false, "cdrom": false,
                "model": "QEMU NVMe Ctrl", "serial": "deadbeef",
                "wwid": "nvme.1b36-6465616462656566-51454d55204e564d65204374726c-00000001",
                "bus_path": "/pci0000:00/0000:00:09.0/nvme", "sub_system": "/sys/class/block",
                "transport": "nvme", "rotational": false,
                "symlinks": ["/dev/disk/by-diskseq/11", "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_deadbeef"],
            }),
            json!({
                "dev_path": "/dev/sda", "size": 256_060_514_304u64, "transport": "sata",
                "rotational": false, "model": "Samsung SSD 860", "serial": "S4EVNX0R123456",
                "symlinks": ["/dev/disk/by-id/ata-Samsung_SSD_860", "/dev/disk/by-path/pci-0000:00:1f.2-ata-1"],
            }),
            json!({
                "dev_path": "/dev/sdb", "size": 4_000_787_030_016u64, "transport": "sata",
                "rotational": true, "model": "WDC WD40EFRX", "serial": "WD-WCC4E1234567",
                "symlinks": ["/dev/disk/by-id/md-name-talos:boot"],
            }),
            json!({
                "dev_path": "/dev/sdc", "size": 1u64 << 40, "transport": "scsi",
                "rotational": false, "model": "QEMU HARDDISK", "serial": "SERIAL123",
            }),
            json!({ "dev_path": "/dev/vda", "size": 12 * GIB, "transport": "virtio", "serial": null }),
            json!({
                "dev_path": "/dev/sr0", "size": 0, "transport": "sata", "cdrom": true,
                "readonly": true, "model": "QEMU DVD-ROM",
            }),
        ]
    }

    /// The disks (by device path) `source` selects, the system disk being /dev/vda.
    fn selected(source: &str) -> Result<Vec<String>, SelectorError> {
        let expression = Expression::compile(source, Env::DiskLocator)?;
        let mut selected = Vec::new();
        for disk in disks() {
            let dev_path = disk["dev_path"].as_str().unwrap_or_default().to_owned();
            let vars = Vars::new().with_disk(&disk)?.with_system_disk(dev_path == "/dev/vda");
            if expression.matches(&vars)? {
                selected.push(dev_path);
            }
        }
        Ok(selected)
    }

    const ALL: &str = "nvme0n1 sda sdb sdc vda sr0";

    /// Disk selectors and the disks of [`disks`] each selects. The expected results of these
    /// tables, and the refusals of [`rejected`], agree with cel-go's given Talos's declarations
    /// but for the differences the module's documentation lists.
    const DISK_SELECTORS: &[(&str, &str)] = &[
        // Talos's documentation and examples.
        ("system_disk", "vda"),
        ("!system_disk", "nvme0n1 sda sdb sdc sr0"),
        (r#"disk.transport == "nvme""#, "nvme0n1"),
        ("disk.transport == 'nvme'", "nvme0n1"),
        ("disk.transport == 'nvme' && !system_disk", "nvme0n1"),
        ("disk.size > 120u * GB && disk.size < 1u * TB", "sda"),
        (r#"disk.transport == "sata" && !disk.rotational && !system_disk"#, "sda sr0"),
        (r#"disk.dev_path == "/dev/vda""#, "vda"),
        (r#"disk.dev_path == "/dev/sda""#, "sda"),
        (r#"disk.transport == "virtio""#, "vda"),
        (r#"disk.transport == "virtio" && disk.size >= 12u * GiB"#, "vda"),
        ("disk.transport == 'scsi' && disk.size < 2u * TiB", "sdc"),
        ("'/dev/disk/by-path/pci-0000:00:1f.2-ata-1' in disk.symlinks", "sda"),
        (r#""/dev/disk/by-id/md-name-talos:boot" in disk.symlinks"#, "sdb"),
        (r#"disk.transport == "nvme" && disk.size > 100u * GiB"#, ""),
        ("disk.size > 1000u * GiB && !disk.rotational", "sdc"),
        ("disk.size > 1000u && !disk.rotational", "nvme0n1 sda sdc vda"),
        ("disk.size > 10u * GiB", "sda sdb sdc vda"),
        (
            "'/dev/disk/by-id/ata-Samsung_SSD_860' in disk.symlinks || '/dev/disk/by-diskseq/11' in disk.symlinks",
            "nvme0n1 sda",
        ),
        // glob: `*` only; `[a-z]` stands for itself, as in Talos.
        ("glob('/dev/sd*', disk.dev_path)", "sda sdb sdc"),
        ("glob('*nvme*', disk.dev_path)", "nvme0n1"),
        ("glob('sd[a-z]', disk.dev_path)", ""),
        ("glob('/dev/vda', disk.dev_path)", "vda"),
        // Fields a disk lacks read as their zero values.
        ("disk.serial == ''", "vda sr0"),
        ("disk.serial.startsWith('deadbeef') && !disk.cdrom", "nvme0n1"),
        ("size(disk.symlinks) == 0", "sdc vda sr0"),
        ("disk.wwid != ''", "nvme0n1"),
        ("disk.cdrom", "sr0"),
        ("disk.readonly", "sr0"),
        ("disk.size == 0u", "sr0"),
        ("disk.io_size == 512u", "nvme0n1"),
        ("disk.firmware_version == '' && disk.secondary_disks == []", ALL),
        // The standard library.
        ("disk.model.matches('^QEMU')", "nvme0n1 sdc sr0"),
        ("matches(disk.model, 'SSD|WDC')", "sda sdb"),
        ("disk.model.contains('DVD')", "sr0"),
        ("disk.serial.endsWith('123')", "sdc"),
        ("disk.symlinks.exists(s, s.startsWith('/dev/disk/by-id/ata-'))", "sda"),
        ("disk.symlinks.all(s, s.startsWith('/dev/disk/by-'))", ALL),
        ("disk.symlinks.exists_one(s, s.contains('by-id'))", "nvme0n1 sda sdb"),
        ("disk.symlinks.filter(s, s.contains('by-path')).size() == 1", "sda"),
        ("disk.symlinks.map(s, size(s)).exists(n, n > 30)", "nvme0n1 sda sdb"),
        ("has(disk.serial) && disk.serial != ''", "nvme0n1 sda sdb sdc"),
        ("disk.size / GiB == 12u", "vda"),
        ("disk.size % GiB != 0u", "nvme0n1 sda sdb"),
        ("int(disk.size / GB) == 10", "nvme0n1"),
        ("double(disk.size) > 3.9e12", "sdb"),
        ("string(disk.size) == '0'", "sr0"),
        ("disk.rotational ? disk.size > 1u * TB : false", "sdb"),
        ("type(disk.size) == uint && disk.transport in ['nvme', 'virtio']", "nvme0n1 vda"),
        ("dyn(disk.size) == 0u", "sr0"),
        ("disk.transport in {'nvme': 1, 'virtio': 2}", "nvme0n1 vda"),
        ("{'x': disk.cdrom}.x", "sr0"),
        ("{'x': [disk.size]}['x'][0] == 0u", "sr0"),
        ("true", ALL),
        ("false", ""),
    ];

    #[test]
    fn disk_selectors() {
        let cases = DISK_SELECTORS;
        for (source, want) in cases {
            let want: Vec<String> = want.split_whitespace().map(|name| format!("/dev/{name}")).collect();
            match selected(source) {
                Ok(got) => assert_eq!(got, want, "{source}"),
                Err(e) => panic!("{source}: {e}"),
            }
        }
    }

    fn volumes() -> Vec<(serde_json::Value, Option<serde_json::Value>)> {
        let disks = disks();
        let vda = disks.iter().find(|d| d["dev_path"] == "/dev/vda").cloned();
        let nvme = disks.iter().find(|d| d["dev_path"] == "/dev/nvme0n1").cloned();
        let linux = "0fc63daf-8483-4772-8e79-3d69d8477de4";
        vec![
            (
                json!({
                    "dev_path": "/dev/vda3", "type": "partition", "parent": "vda",
                    "parent_dev_path": "/dev/vda", "size": 1_048_576, "partition_index": 3,
                    "partition_label": "META", "name": "talosmeta", "partition_type": linux,
                }),
                vda.clone(),
            ),
            (
                json!({
                    "dev_path": "/dev/vda4", "type": "partition", "parent": "vda",
                    "device_path": "/sys/devices/pci0000:00/0000:00:07.0/virtio4/block/vda/vda4",
                    "parent_dev_path": "/dev/vda", "size": 5_179_965_440u64,
                    "pretty_size": "5.2 GB", "sector_size": 512, "io_size": 512, "name": "xfs",
                    "uuid": "2f115241-781f-4817-a373-fc957d63326f", "label": "EPHEMERAL",
                    "block_size": 512, "filesystem_block_size": 4096,
                    "probed_size": 5_112_856_576u64,
                    "partition_uuid": "73111630-87ed-4aad-bffb-af6d0f55ab3c",
                    "partition_type": linux, "partition_label": "EPHEMERAL",
                    "partition_index": 4,
                }),
                vda.clone(),
            ),
            (
                json!({
                    "dev_path": "/dev/vda5", "parent_dev_path": "/dev/vda", "partition_index": 5,
                    "partition_label": "STATE", "name": "xfs", "label": "STATE",
                }),
                vda,
            ),
            (
                json!({
                    "dev_path": "/dev/nvme0n1p2", "parent_dev_path": "/dev/nvme0n1",
                    "partition_index": 2, "partition_label": "MY-DATA", "name": "ext4",
                    "size": 8 * GB,
                }),
                nvme.clone(),
            ),
            (
                json!({
                    "dev_path": "/dev/nvme0n1p3", "parent_dev_path": "/dev/nvme0n1",
                    "partition_index": 3, "partition_label": "r-lvm-1", "name": "lvm2",
                }),
                nvme,
            ),
        ]
    }

    fn located(source: &str) -> Result<Vec<String>, SelectorError> {
        let expression = Expression::compile(source, Env::VolumeLocator)?;
        let mut located = Vec::new();
        for (volume, disk) in volumes() {
            let mut vars = Vars::new().with_volume(&volume)?;
            if let Some(disk) = disk {
                vars = vars.with_disk(&disk)?;
            }
            if expression.matches(&vars)? {
                located.push(volume["dev_path"].as_str().unwrap_or_default().to_owned());
            }
        }
        Ok(located)
    }

    /// Volume locators and the volumes of [`volumes`] each locates.
    const VOLUME_LOCATORS: &[(&str, &str)] = &[
        // The locators of Talos's system volumes.
        ("volume.partition_label == 'STATE'", "vda5"),
        ("volume.partition_label == 'EPHEMERAL'", "vda4"),
        ("volume.partition_label == 'EPHEMERAL' && volume.name != ''", "vda4"),
        ("volume.partition_label == 'META' && volume.name in ['', 'talosmeta'] && volume.size == 1048576u", "vda3"),
        ("volume.parent_dev_path == '/dev/vda' && volume.partition_index == 4u", "vda4"),
        // Talos's documentation and examples.
        ("volume.label == 'EPHEMERAL'", "vda4"),
        ("volume.partition_label == 'MY-DATA'", "nvme0n1p2"),
        (r#"volume.partition_label == "MY-DATA""#, "nvme0n1p2"),
        ("volume.name == 'xfs' && volume.size > 1000u * TB", ""),
        ("volume.name == 'ext4' && volume.size > 1000u * TB", ""),
        ("volume.name == 'xfs' && disk.transport == 'nvme'", ""),
        ("volume.name == 'ext4' && disk.transport == 'nvme'", "nvme0n1p2"),
        (r#"volume.name == "xfs" && disk.serial == "SERIAL123""#, ""),
        ("volume.partition_index == 2u && disk.serial == 'deadbeef'", "nvme0n1p2"),
        (r#"volume.partition_label.startsWith("r-lvm")"#, "nvme0n1p3"),
        ("volume.partition_label == 'EPHEMERAL' && '/dev/disk/by-diskseq/11' in disk.symlinks", ""),
        // Other fields, uint32 ones included.
        ("volume.partition_type == '0fc63daf-8483-4772-8e79-3d69d8477de4'", "vda3 vda4"),
        ("volume.block_size == 512u && volume.filesystem_block_size == 4096u", "vda4"),
        ("volume.probed_size > 0u && volume.probed_size < volume.size && volume.offset == 0u", "vda4"),
        ("volume.size >= 5u * GB", "vda4 nvme0n1p2"),
        ("volume.type == 'partition' && volume.parent == 'vda'", "vda3 vda4"),
        ("disk.transport == 'virtio' && volume.partition_label != 'META'", "vda4 vda5"),
    ];

    #[test]
    fn volume_locators() {
        let cases = VOLUME_LOCATORS;
        for (source, want) in cases {
            let want: Vec<String> = want.split_whitespace().map(|name| format!("/dev/{name}")).collect();
            match located(source) {
                Ok(got) => assert_eq!(got, want, "{source}"),
                Err(e) => panic!("{source}: {e}"),
            }
        }
    }

    #[test]
    fn size_constants() {
        for (unit, multiplier) in SIZE_UNITS {
            for env in [Env::DiskLocator, Env::VolumeLocator] {
                let source = format!("{unit} == {multiplier}u && 2u * {unit} / 2u == {unit}");
                let expression = Expression::compile(&source, env).unwrap();
                assert!(expression.matches(&Vars::new()).unwrap(), "{source}");
            }
        }
        let table = [
            ("KiB", 1024u64),
            ("MiB", 1024 * 1024),
            ("GiB", 1024 * 1024 * 1024),
            ("TiB", 1024u64.pow(4)),
            ("PiB", 1024u64.pow(5)),
            ("EiB", 1024u64.pow(6)),
            ("kB", 1000),
            ("MB", 1000 * 1000),
            ("GB", 1000 * 1000 * 1000),
            ("TB", 1000u64.pow(4)),
            ("PB", 1000u64.pow(5)),
            ("EB", 1000u64.pow(6)),
        ];
        assert_eq!(SIZE_UNITS, table);
        let overflow = Expression::compile("16u * EiB > 0u", Env::DiskLocator).unwrap();
        assert!(matches!(overflow.matches(&Vars::new()), Err(SelectorError::Evaluation { .. })));
    }

    #[test]
    fn glob_matches_whole_strings_with_stars_only() {
        let cases = [
            ("", "", true),
            ("", "a", false),
            ("*", "", true),
            ("**", "", true),
            ("*", "/dev/sda", true),
            ("/dev/sda", "/dev/sda", true),
            ("/dev/sd", "/dev/sda", false),
            ("/dev/sd*", "/dev/sda", true),
            ("/dev/sd*", "/dev/sd", true),
            ("/dev/sd*", "/dev/vda", false),
            ("*sda", "/dev/sda", true),
            ("*da", "/dev/sdb", false),
            ("/dev/*a", "/dev/sda", true),
            ("/dev/*/x", "/dev/disk/by-id/x", true),
            ("*is*a*", "this is a test", true),
            ("**is**a***test*", "this is a test", true),
            ("test*", "this is a test", false),
            ("*is", "this is a test", false),
            ("*no*", "this is a test", false),
            ("a*b", "a", false),
            ("ab*ab", "ab", false),
            ("a*a", "aa", true),
            ("a*a", "a", false),
            ("sd?", "sda", false),
            ("sd[a-z]", "sda", false),
            ("sd[a-z]", "sd[a-z]", true),
            ("00:1a:2b:*", "00:1a:2b:3c:4d:5e", true),
        ];
        for (pattern, text, want) in cases {
            assert_eq!(glob(pattern, text), want, "glob({pattern:?}, {text:?})");
        }
    }

    #[derive(Debug)]
    enum Want {
        Syntax,
        Undeclared(&'static str),
        Field(&'static str),
        Type(&'static str),
        Output(&'static str),
    }

    /// Expressions compile refuses, and why.
    fn rejected() -> Vec<(Env, &'static str, Want)> {
        use Env::{DiskLocator as D, VolumeLocator as V};
        vec![
            (D, "disk.size >", Want::Syntax),
            (D, "disk.size > 10u *", Want::Syntax),
            (D, "", Want::Syntax),
            (D, "disk.?serial == ''", Want::Syntax),
            // Talos's own documentation has this one; its checker rejects it too.
            (D, "disk.serial.startsWith('deadbeef') && !cdrom", Want::Undeclared("cdrom")),
            (D, "volume.name == 'xfs'", Want::Undeclared("volume")),
            (D, "foo.bar == 1", Want::Undeclared("foo")),
            (D, "max(1, 2) > 0", Want::Undeclared("max")),
            (D, "disk.symlinks.exists(s, t == '')", Want::Undeclared("t")),
            (V, "system_disk", Want::Undeclared("system_disk")),
            (V, "glob('*', volume.name)", Want::Undeclared("glob")),
            (D, "disk.sizee > 1u", Want::Field("sizee")),
            (D, "has(disk.partition_label)", Want::Field("partition_label")),
            (V, "volume.transport == 'nvme'", Want::Field("transport")),
            (V, "disk.partition_label == 'x'", Want::Field("partition_label")),
            // Sizes are uints: an int beside one has no overload, as Talos's documentation warns.
            (D, "disk.size > 10 * GiB", Want::Type("'_*_' applied to '(int, uint)'")),
            (D, "disk.size > 10", Want::Type("'_>_' applied to '(uint, int)'")),
            (D, "disk.size > 1.5", Want::Type("'_>_' applied to '(uint, double)'")),
            // Also from Talos's documentation, and rejected by its checker as well.
            (
                V,
                "volume.partition_index == 2 && disk.serial == 'SERIAL123'",
                Want::Type("'_==_' applied to '(uint, int)'"),
            ),
            (D, "disk.transport == 1", Want::Type("'_==_' applied to '(string, int)'")),
            (D, "disk.rotational && disk.size", Want::Type("'_&&_' applied to '(bool, uint)'")),
            (D, "!disk.model", Want::Type("'!_' applied to '(string)'")),
            (D, "-disk.size < 0u", Want::Type("'-_' applied to '(uint)'")),
            (D, "disk.size.startsWith('1')", Want::Type("'startsWith' applied to 'uint.(string)'")),
            (D, "1 in disk.symlinks", Want::Type("'@in' applied to '(int, list(string))'")),
            (D, "glob(disk.dev_path)", Want::Type("'glob' applied to '(string)'")),
            (D, "glob(1, disk.dev_path)", Want::Type("'glob' applied to '(int, string)'")),
            (D, "disk.symlinks.exists(s, s)", Want::Type("'_||_' applied to '(bool, string)'")),
            (D, "disk.symlinks.all(s, size(s))", Want::Type("'_&&_' applied to '(bool, int)'")),
            (D, "disk.size.foo", Want::Type("type 'uint' does not support field selection")),
            // Talos: an error on each evaluation.
            (D, "disk.model.matches('[')", Want::Type("invalid regular expression")),
            (D, "timestamp('2024-01-01T00:00:00Z') < timestamp('2025-01-01T00:00:00Z')", Want::Type("not supported")),
            (D, "disk.size", Want::Output("uint")),
            (D, "disk.dev_path", Want::Output("string")),
            (D, "disk.size * 2u", Want::Output("uint")),
            (D, "disk.symlinks", Want::Output("list(string)")),
            (D, "disk", Want::Output("talos.resource.definitions.block.DiskSpec")),
            (V, "volume.partition_index", Want::Output("uint")),
            (D, "GiB", Want::Output("uint")),
            (D, "{'a': 'b'}['a']", Want::Output("string")),
            (D, "{'a': 1}.a", Want::Output("int")),
            (D, "{'a': 1}[1] == 1", Want::Type("'_[_]' applied to '(map(string, int), int)'")),
            (D, "1 in {'a': 1}", Want::Type("'@in' applied to '(int, map(string, int))'")),
        ]
    }

    #[test]
    fn rejected_at_compile_time() {
        let cases = rejected();
        for (env, source, want) in cases {
            let err = match Expression::compile(source, env) {
                Ok(_) => panic!("{source}: compiled, want {want:?}"),
                Err(e) => e,
            };
            let ok = match (&want, &err) {
                (Want::Syntax, SelectorError::Syntax { .. }) => true,
                (Want::Undeclared(name), SelectorError::Undeclared { name: got, .. }) => got == name,
                (Want::Field(field), SelectorError::UndefinedField { field: got, .. }) => got == field,
                (Want::Type(problem), SelectorError::Type { problem: got, .. }) => got.contains(problem),
                (Want::Output(ty), SelectorError::OutputType { got, .. }) => got == ty,
                _ => false,
            };
            assert!(ok, "{source}: got {err:?}, want {want:?}");
            assert!(err.to_string().contains(source), "{err} names the expression");
        }
    }

    #[test]
    fn errors_name_the_problem_and_where() {
        let err = Expression::compile("disk.size > 1u && !cdrom", Env::DiskLocator).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CEL expression \"disk.size > 1u && !cdrom\": undeclared reference to 'cdrom' at 1:20 (not in the DiskLocator environment)"
        );
        let err = Expression::compile("disk.sizee > 1u", Env::DiskLocator).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CEL expression \"disk.sizee > 1u\": undefined field 'sizee' of talos.resource.definitions.block.DiskSpec at 1:5"
        );
        let err = Expression::compile("disk.size > 10", Env::DiskLocator).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CEL expression \"disk.size > 10\": found no matching overload for '_>_' applied to '(uint, int)' at 1:11"
        );
        let err = Expression::compile("disk.size", Env::DiskLocator).unwrap_err();
        assert_eq!(err.to_string(), "CEL expression \"disk.size\": expression output type is uint, expected bool");
        let err = Expression::compile("disk.size >", Env::DiskLocator).unwrap_err();
        assert!(matches!(&err, SelectorError::Syntax { message, .. } if message.starts_with("1:12: ")), "{err:?}");
    }

    #[test]
    fn evaluation_errors() {
        let disk = json!({ "dev_path": "/dev/sda", "size": 100 });
        let vars = Vars::new().with_disk(&disk).unwrap();

        // system_disk is only known after installation: an error when it is reached.
        let expression = Expression::compile("system_disk", Env::DiskLocator).unwrap();
        assert_eq!(
            expression.matches(&vars),
            Err(SelectorError::Unset { expression: "system_disk".to_owned(), variable: "system_disk".to_owned() })
        );
        let expression = Expression::compile("disk.size > 1000u && system_disk", Env::DiskLocator).unwrap();
        assert_eq!(expression.matches(&vars), Ok(false));
        let expression = Expression::compile("system_disk || disk.size > 10u", Env::DiskLocator).unwrap();
        assert_eq!(expression.matches(&vars), Ok(true));

        // A volume not on a known disk has no `disk`.
        let volume = json!({ "name": "xfs" });
        let vars = Vars::new().with_volume(&volume).unwrap();
        let expression = Expression::compile("disk.transport == 'nvme'", Env::VolumeLocator).unwrap();
        assert!(matches!(
            expression.matches(&vars),
            Err(SelectorError::Unset { variable, .. }) if variable == "disk"
        ));
        let expression =
            Expression::compile("volume.name == 'ext4' && disk.transport == 'nvme'", Env::VolumeLocator).unwrap();
        assert_eq!(expression.matches(&vars), Ok(false));

        // What the checker cannot type is checked when evaluated.
        let vars = Vars::new().with_disk(&disk).unwrap();
        // Talos refuses these when compiling them: their type is dyn.
        for (source, got) in [("dyn(disk.size)", "uint"), ("{'a': dyn('b')}['a']", "string"), ("[dyn(1)][0]", "int")] {
            let expression = Expression::compile(source, Env::DiskLocator).unwrap();
            assert_eq!(
                expression.matches(&vars),
                Err(SelectorError::NotBool { expression: source.to_owned(), got }),
                "{source}"
            );
        }
        let expression = Expression::compile("disk.size * EiB > 1u", Env::DiskLocator).unwrap();
        assert!(matches!(
            expression.matches(&vars),
            Err(SelectorError::Evaluation { message, .. }) if message.contains("Overflow")
        ));
        let expression = Expression::compile("disk.model.matches(disk.dev_path + '[')", Env::DiskLocator).unwrap();
        assert!(matches!(
            expression.matches(&vars),
            Err(SelectorError::Evaluation { message, .. }) if message.contains("invalid regular expression")
        ));
    }

    #[test]
    fn vars_take_specs_of_talos_field_types() {
        #[derive(Serialize)]
        struct DiskSpec {
            dev_path: String,
            size: u64,
            io_size: u32,
            serial: Option<String>,
            rotational: bool,
            symlinks: Vec<String>,
            // Not a field of Talos's DiskSpec: not visible to expressions.
            internal: u8,
        }
        let spec = DiskSpec {
            dev_path: "/dev/nvme0n1".to_owned(),
            size: 2 * 1024 * GIB,
            io_size: 4096,
            serial: None,
            rotational: false,
            symlinks: vec!["/dev/disk/by-id/nvme-x".to_owned()],
            internal: 1,
        };
        let vars = Vars::new().with_disk(&spec).unwrap().with_system_disk(false);
        for source in [
            "disk.size >= 10u * GiB",
            "disk.size == 2u * TiB",
            "disk.io_size == 4096u",
            "disk.serial == ''",
            "!disk.rotational && !system_disk",
            "glob('/dev/nvme*', disk.dev_path)",
            "'/dev/disk/by-id/nvme-x' in disk.symlinks",
            "disk.model == '' && !disk.cdrom && disk.uuid == ''",
        ] {
            let expression = Expression::compile(source, Env::DiskLocator).unwrap();
            assert_eq!(expression.matches(&vars), Ok(true), "{source}");
        }
        assert!(matches!(
            Expression::compile("disk.internal == 1u", Env::DiskLocator),
            Err(SelectorError::UndefinedField { .. })
        ));

        for (spec, problem) in [
            (json!({ "size": "big" }), "field `size` is a string, expected uint"),
            (json!({ "size": -1 }), "field `size` is a int, expected uint"),
            (json!({ "rotational": 1 }), "field `rotational` is a uint, expected bool"),
            (json!({ "symlinks": [1] }), "field `symlinks` is a list, expected list(string)"),
            (json!({ "serial": ["x"] }), "field `serial` is a list, expected string"),
            (json!([1]), "a list is not a map of fields"),
            (json!("sda"), "a string is not a map of fields"),
        ] {
            assert_eq!(
                Vars::new().with_disk(&spec).unwrap_err(),
                SelectorError::Variable { variable: "disk", problem: problem.to_owned() },
                "{spec}"
            );
        }
        assert!(matches!(
            Vars::new().with_volume(&json!({ "partition_index": true })),
            Err(SelectorError::Variable { variable: "volume", .. })
        ));
    }

    #[test]
    fn config_fields_hold_compiled_expressions() {
        #[derive(Debug, Deserialize, Serialize)]
        struct DiskSelector {
            #[serde(rename = "match")]
            r#match: DiskExpression,
        }
        #[derive(Debug, Deserialize, Serialize)]
        struct Locator {
            #[serde(rename = "match")]
            r#match: VolumeExpression,
        }

        let selector: DiskSelector =
            serde_json::from_str(r#"{"match": "disk.transport == \"nvme\" && !system_disk"}"#).unwrap();
        assert_eq!(selector.r#match.source(), r#"disk.transport == "nvme" && !system_disk"#);
        assert_eq!(selector.r#match.env(), Env::DiskLocator);
        assert_eq!(
            serde_json::to_string(&selector).unwrap(),
            r#"{"match":"disk.transport == \"nvme\" && !system_disk"}"#
        );
        let vars = Vars::new().with_disk(&json!({ "transport": "nvme" })).unwrap().with_system_disk(false);
        assert_eq!(selector.r#match.matches(&vars), Ok(true));

        let err = serde_json::from_str::<DiskSelector>(r#"{"match": "disk.size > 10"}"#).unwrap_err();
        assert!(err.to_string().contains("'(uint, int)'"), "{err}");
        let err = serde_json::from_str::<DiskSelector>(r#"{"match": "volume.name == ''"}"#).unwrap_err();
        assert!(err.to_string().contains("undeclared reference to 'volume'"), "{err}");
        let err = serde_json::from_str::<Locator>(r#"{"match": "system_disk"}"#).unwrap_err();
        assert!(err.to_string().contains("undeclared reference to 'system_disk'"), "{err}");

        let locator = VolumeExpression::try_from("volume.partition_label == 'EPHEMERAL'").unwrap();
        assert_eq!(locator.to_string(), "volume.partition_label == 'EPHEMERAL'");
        assert_eq!("volume.partition_label == 'EPHEMERAL'".parse::<VolumeExpression>().unwrap(), locator);
        assert_ne!(
            Expression::compile("true", Env::DiskLocator).unwrap(),
            Expression::compile("true", Env::VolumeLocator).unwrap()
        );
    }

    #[test]
    fn expressions_are_shared_between_threads() {
        fn shareable<T: Send + Sync + Clone + 'static>() {}
        shareable::<Expression>();
        shareable::<DiskExpression>();
        shareable::<VolumeExpression>();
        shareable::<SelectorError>();

        let expression = DiskExpression::try_from("disk.size > 1u * GiB").unwrap();
        let handles: Vec<_> = (0..4u64)
            .map(|i| {
                let expression = expression.clone();
                std::thread::spawn(move || {
                    let vars = Vars::new().with_disk(&json!({ "size": i * GIB })).unwrap();
                    expression.matches(&vars)
                })
            })
            .collect();
        let got: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(got, [Ok(false), Ok(false), Ok(true), Ok(true)]);
    }
}
