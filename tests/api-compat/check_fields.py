#!/usr/bin/env python3
"""Check talosbox's API descriptors against a Talos client that nobody here wrote.

The reference is the PyPI package `talos-linux-api-v1-6-0`: betterproto classes generated
from Talos v1.6's own .proto files. For every message, enum and service of ours that the
package also has, this compares field numbers, names, protobuf types (and so wire types),
repeated/map shape, the types that message and enum fields refer to, every enum value, and
every RPC's path, streaming shape and request/response types. Anything of ours that v1.6 does
not have (newer RPCs, fields and values, the cosi.resource package, our own extension) is
listed as "not in v1.6" and is not a failure. Something v1.6 has that ours lacks, inside a
message or enum we do declare, is a failure: dropping a field or value breaks old peers.

Run (Python 3.11; from the repository root):

    python3 -m venv /tmp/api-compat-venv
    /tmp/api-compat-venv/bin/pip install talos-linux-api-v1-6-0 protobuf
    API_DESCRIPTOR_SET_OUT=/tmp/talosbox-api.bin \
        cargo test --lib proto::tests::write_descriptor_set -- --ignored --exact
    /tmp/api-compat-venv/bin/python tests/api-compat/check_fields.py /tmp/talosbox-api.bin

`--self-test` first damages copies of the set in ways the check must catch (a renumbered field,
int32 turned sint32, a streaming RPC made unary, ...) and fails unless every one is caught:

    /tmp/api-compat-venv/bin/python tests/api-compat/check_fields.py --self-test /tmp/talosbox-api.bin

Exit status: 0 when everything compared agrees, 1 on any mismatch or when nothing was
compared at all, 2 on bad usage.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import typing

import betterproto
from betterproto.compile.naming import (
    pythonize_class_name,
    pythonize_enum_member_name,
    pythonize_field_name,
)
from google.protobuf import descriptor_pb2, descriptor_pool

REFERENCE = "talos_linux_api.v1_6_0"

# Files protox adds for the well-known types: not ours to check.
SKIP_PACKAGES = {"google.protobuf"}

# Fields of ours that are deliberately not Talos's.
EXTENSIONS = {"machine.ApplyConfiguration.diff_json"}

F = descriptor_pb2.FieldDescriptorProto
TYPE_NAMES = {
    F.TYPE_DOUBLE: "double",
    F.TYPE_FLOAT: "float",
    F.TYPE_INT64: "int64",
    F.TYPE_UINT64: "uint64",
    F.TYPE_INT32: "int32",
    F.TYPE_FIXED64: "fixed64",
    F.TYPE_FIXED32: "fixed32",
    F.TYPE_BOOL: "bool",
    F.TYPE_STRING: "string",
    F.TYPE_GROUP: "group",
    F.TYPE_MESSAGE: "message",
    F.TYPE_BYTES: "bytes",
    F.TYPE_UINT32: "uint32",
    F.TYPE_ENUM: "enum",
    F.TYPE_SFIXED32: "sfixed32",
    F.TYPE_SFIXED64: "sfixed64",
    F.TYPE_SINT32: "sint32",
    F.TYPE_SINT64: "sint64",
}

WIRE_TYPES = {
    "int32": 0, "int64": 0, "uint32": 0, "uint64": 0, "sint32": 0, "sint64": 0, "bool": 0, "enum": 0,
    "fixed64": 1, "sfixed64": 1, "double": 1,
    "string": 2, "bytes": 2, "message": 2, "map": 2,
    "fixed32": 5, "sfixed32": 5, "float": 5,
}  # fmt: skip

# betterproto turns these well-known types into Python types rather than message classes.
WELL_KNOWN_HINTS = {
    ".google.protobuf.Duration": "timedelta",
    ".google.protobuf.Timestamp": "datetime",
}


def wire_type(proto_type: str, repeated: bool) -> int:
    """The wire type a field's values travel as; proto3 packs repeated scalars."""
    if repeated and WIRE_TYPES[proto_type] != 2:
        return 2
    return WIRE_TYPES[proto_type]


class Report:
    def __init__(self) -> None:
        self.failures: list[str] = []
        self.not_in_reference: list[str] = []
        self.counts = {
            "messages": 0,
            "fields": 0,
            "enums": 0,
            "enum values": 0,
            "methods": 0,
        }

    def fail(self, what: str) -> None:
        self.failures.append(what)

    def missing(self, what: str) -> None:
        self.not_in_reference.append(what)


class Ours:
    """Our descriptor set, indexed by fully qualified name (`.machine.Event`)."""

    def __init__(self, data: bytes) -> None:
        self.set = descriptor_pb2.FileDescriptorSet.FromString(data)
        # Loading every file into a pool is protobuf's own check that the set is complete and
        # consistent (every import present, every type name resolvable).
        pool = descriptor_pool.DescriptorPool()
        for file in self.set.file:
            pool.Add(file)
        for file in self.set.file:
            pool.FindFileByName(file.name)

        self.messages: dict[str, descriptor_pb2.DescriptorProto] = {}
        self.enums: dict[str, descriptor_pb2.EnumDescriptorProto] = {}
        for file in self.set.file:
            prefix = f".{file.package}" if file.package else ""
            for message in file.message_type:
                self._index_message(prefix, message)
            for enum_type in file.enum_type:
                self.enums[f"{prefix}.{enum_type.name}"] = enum_type

    def _index_message(self, prefix: str, message: descriptor_pb2.DescriptorProto) -> None:
        name = f"{prefix}.{message.name}"
        self.messages[name] = message
        for nested in message.nested_type:
            self._index_message(name, nested)
        for enum_type in message.enum_type:
            self.enums[f"{name}.{enum_type.name}"] = enum_type


def split_name(full_name: str, package: str) -> list[str]:
    """`.machine.A.B` in package `machine` -> ["A", "B"]."""
    return full_name[len(package) + 2 :].split(".")


def package_of(full_name: str, packages: list[str]) -> str:
    """The longest package that prefixes a fully qualified name."""
    best = ""
    for package in packages:
        if full_name.startswith(f".{package}.") and len(package) > len(best):
            best = package
    return best


def betterproto_name(parts: list[str]) -> str:
    # betterproto flattens nested types as Outer_Inner before Pascal-casing them.
    return pythonize_class_name("_".join(parts))


def load_reference(package: str):
    try:
        return importlib.import_module(f"{REFERENCE}.{package}")
    except ModuleNotFoundError:
        return None


def hint_name(hint: object) -> str:
    """The type a (possibly List[...]) hint names: `common.Metadata`, or a bare name such as
    `timedelta` for what is not one of the reference's own classes."""
    if typing.get_origin(hint) in (list, typing.List):
        (hint,) = typing.get_args(hint)
    if isinstance(hint, typing.ForwardRef):
        hint = hint.__forward_arg__
    if isinstance(hint, str):
        text = hint
        if text.startswith("List[") and text.endswith("]"):
            text = text[5:-1]
        return text.strip("\"'").rsplit(".", 1)[-1]
    name = getattr(hint, "__name__", str(hint))
    module = getattr(hint, "__module__", "")
    if module.startswith(f"{REFERENCE}."):
        return f"{module[len(REFERENCE) + 1 :]}.{name}"
    return name


def is_repeated_hint(hint: object) -> bool:
    if typing.get_origin(hint) in (list, typing.List):
        return True
    return isinstance(hint, str) and hint.startswith("List[")


def expected_hint(type_name: str, packages: list[str], qualified: bool = True) -> str:
    """What hint_name should give for a field (or, unqualified, an RPC) of type `type_name`."""
    if type_name in WELL_KNOWN_HINTS:
        return WELL_KNOWN_HINTS[type_name]
    if type_name.startswith(".google.protobuf."):
        # betterproto's own classes for the well-known types, outside the reference package.
        return betterproto_name(split_name(type_name, "google.protobuf"))
    package = package_of(type_name, packages)
    name = betterproto_name(split_name(type_name, package))
    return f"{package}.{name}" if qualified else name


def check_message(report: Report, ours: Ours, full_name: str, message, cls, packages: list[str]) -> None:
    report.counts["messages"] += 1
    display = full_name[1:]
    theirs = {}
    for field in dataclasses.fields(cls):
        meta = field.metadata.get("betterproto")
        if meta is not None:
            theirs[meta.number] = (field, meta)
    try:
        hints = typing.get_type_hints(cls)
    except NameError:
        # Unresolvable forward references: fall back to the raw annotations below.
        hints = {}

    seen = set()
    for field in message.field:
        where = f"{display}.{field.name} (= {field.number})"
        if field.number not in theirs:
            if f"{display}.{field.name}" in EXTENSIONS:
                report.missing(f"{where}: talosbox extension")
            else:
                report.missing(f"{where}: field not in v1.6")
            continue
        seen.add(field.number)
        report.counts["fields"] += 1
        their_field, meta = theirs[field.number]

        if their_field.name != pythonize_field_name(field.name):
            report.fail(f"{where}: v1.6 calls field {field.number} {their_field.name!r}")

        repeated = field.label == F.LABEL_REPEATED
        entry = ours.messages.get(field.type_name) if field.type == F.TYPE_MESSAGE else None
        if entry is not None and entry.options.map_entry:
            key, value = entry.field[0], entry.field[1]
            ours_map = (TYPE_NAMES[key.type], TYPE_NAMES[value.type])
            if meta.proto_type != "map" or tuple(meta.map_types or ()) != ours_map:
                report.fail(f"{where}: ours is map<{ours_map[0]}, {ours_map[1]}>, v1.6 has {meta.proto_type} {meta.map_types}")
            continue

        ours_type = TYPE_NAMES[field.type]
        if meta.proto_type != ours_type:
            report.fail(f"{where}: ours is {ours_type}, v1.6 has {meta.proto_type}")
        hint = hints.get(their_field.name, their_field.type)
        their_repeated = is_repeated_hint(hint)
        if repeated != their_repeated:
            report.fail(f"{where}: repeated is {repeated} in ours, {their_repeated} in v1.6")
        if meta.proto_type in WIRE_TYPES and wire_type(ours_type, repeated) != wire_type(meta.proto_type, their_repeated):
            report.fail(f"{where}: wire type differs")
        if bool(meta.optional) != field.proto3_optional:
            report.fail(f"{where}: proto3 optional is {field.proto3_optional} in ours, {bool(meta.optional)} in v1.6")
        if field.type in (F.TYPE_MESSAGE, F.TYPE_ENUM):
            want = expected_hint(field.type_name, packages)
            got = hint_name(hint)
            if got != want:
                report.fail(f"{where}: refers to {field.type_name[1:]} ({want}), v1.6 to {got}")

    for number, (their_field, _) in sorted(theirs.items()):
        if number not in seen and number not in {f.number for f in message.field}:
            report.fail(f"{display}: v1.6 has field {their_field.name} = {number}, ours does not")


def check_enum(report: Report, full_name: str, parts: list[str], enum_type, cls) -> None:
    report.counts["enums"] += 1
    display = full_name[1:]
    # betterproto strips the enum's own name from value names; compare through its function.
    proto_enum_name = "_".join(parts)
    theirs = {member.value: member.name for member in cls}
    ours_numbers = set()
    for value in enum_type.value:
        ours_numbers.add(value.number)
        where = f"{display}.{value.name} (= {value.number})"
        if value.number not in theirs:
            report.missing(f"{where}: enum value not in v1.6")
            continue
        report.counts["enum values"] += 1
        want = pythonize_enum_member_name(value.name, proto_enum_name)
        if theirs[value.number] != want:
            report.fail(f"{where}: v1.6 calls {value.number} {theirs[value.number]!r}")
    for number, name in sorted(theirs.items()):
        if number not in ours_numbers:
            report.fail(f"{display}: v1.6 has value {name} = {number}, ours does not")


def check_services(report: Report, ours: Ours, packages: list[str]) -> None:
    for file in ours.set.file:
        if file.package in SKIP_PACKAGES or not file.service:
            continue
        module = load_reference(file.package)
        for service in file.service:
            qualified = f"{file.package}.{service.name}"
            base = getattr(module, f"{pythonize_class_name(service.name)}Base", None) if module else None
            if base is None:
                report.missing(f"{qualified}: service not in v1.6")
                continue
            # The v1.6 package's `time` module names google.protobuf.Empty in its handler table
            # without importing it (its generator's defect); give it the module it means.
            if not hasattr(module, "betterproto_lib_google_protobuf"):
                import betterproto.lib.google.protobuf as well_known

                module.betterproto_lib_google_protobuf = well_known
            mapping = base.__mapping__(base())
            for method in service.method:
                path = f"/{qualified}/{method.name}"
                if path not in mapping:
                    report.missing(f"{path}: method not in v1.6")
                    continue
                report.counts["methods"] += 1
                handler = mapping[path]
                shape = ("STREAM" if method.client_streaming else "UNARY") + "_" + (
                    "STREAM" if method.server_streaming else "UNARY"
                )
                if handler.cardinality.name != shape:
                    report.fail(f"{path}: ours is {shape}, v1.6 is {handler.cardinality.name}")
                for side, type_name, cls in (
                    ("request", method.input_type, handler.request_type),
                    ("response", method.output_type, handler.reply_type),
                ):
                    want = expected_hint(type_name, packages, qualified=False)
                    if cls.__name__ != want:
                        report.fail(f"{path}: {side} is {type_name[1:]} in ours, {cls.__name__} in v1.6")


def check(data: bytes) -> Report:
    report = Report()
    ours = Ours(data)
    packages = sorted({f.package for f in ours.set.file})

    for full_name, message in sorted(ours.messages.items()):
        package = package_of(full_name, packages)
        if package in SKIP_PACKAGES or message.options.map_entry:
            continue
        module = load_reference(package)
        parts = split_name(full_name, package)
        cls = getattr(module, betterproto_name(parts), None) if module else None
        if cls is None or not (isinstance(cls, type) and issubclass(cls, betterproto.Message)):
            why = "package" if module is None else "message"
            report.missing(f"{full_name[1:]}: {why} not in v1.6")
            continue
        check_message(report, ours, full_name, message, cls, packages)

    for full_name, enum_type in sorted(ours.enums.items()):
        package = package_of(full_name, packages)
        if package in SKIP_PACKAGES:
            continue
        module = load_reference(package)
        parts = split_name(full_name, package)
        cls = getattr(module, betterproto_name(parts), None) if module else None
        if cls is None or not (isinstance(cls, type) and issubclass(cls, betterproto.Enum)):
            why = "package" if module is None else "enum"
            report.missing(f"{full_name[1:]}: {why} not in v1.6")
            continue
        check_enum(report, full_name, parts, enum_type, cls)

    check_services(report, ours, packages)
    return report


def _find(ours_set, file_name: str):
    return next(f for f in ours_set.file if f.name == file_name)


def _message(file, *path: str):
    messages = file.message_type
    for name in path:
        message = next(m for m in messages if m.name == name)
        messages = message.nested_type
    return message


def _field(message, name: str):
    return next(f for f in message.field if f.name == name)


def _mutations():
    """Damage that the check must catch: (what, how), each applied to a fresh copy of our set."""
    machine = "machine/machine.proto"

    def renumber(s):
        _field(_message(_find(s, machine), "ApplyConfigurationRequest"), "dry_run").number = 7

    def zigzag(s):
        _field(_message(_find(s, machine), "ProcessInfo"), "pid").type = F.TYPE_SINT32

    def bytes_as_string(s):
        _field(_message(_find(s, "common/common.proto"), "Data"), "bytes").type = F.TYPE_STRING

    def rename(s):
        _field(_message(_find(s, machine), "ApplyConfiguration"), "mode_details").name = "details"

    def not_repeated(s):
        _field(_message(_find(s, machine), "ApplyConfiguration"), "warnings").label = F.LABEL_OPTIONAL

    def other_type(s):
        _field(_message(_find(s, machine), "Event"), "data").type_name = ".google.protobuf.Duration"

    def enum_value(s):
        mode = next(e for e in _message(_find(s, machine), "RebootRequest").enum_type if e.name == "Mode")
        next(v for v in mode.value if v.name == "POWERCYCLE").number = 3

    def unary_logs(s):
        service = next(x for x in _find(s, machine).service if x.name == "MachineService")
        next(m for m in service.method if m.name == "Logs").server_streaming = False

    def wrong_response(s):
        service = next(x for x in _find(s, machine).service if x.name == "MachineService")
        next(m for m in service.method if m.name == "Hostname").output_type = ".machine.MemoryResponse"

    return [
        ("a renumbered field", renumber),
        ("int32 turned sint32 (same wire type, other encoding)", zigzag),
        ("bytes turned string", bytes_as_string),
        ("a renamed field", rename),
        ("a repeated field made singular", not_repeated),
        ("a message field pointing at another type", other_type),
        ("a renumbered enum value", enum_value),
        ("a streaming RPC made unary", unary_logs),
        ("an RPC with another response type", wrong_response),
    ]


def self_test(data: bytes) -> int:
    """Proves the check can fail: each mutation must produce a mismatch, the clean set none."""
    ok = True
    if check(data).failures:
        print("self-test: the undamaged descriptor set already fails")
        ok = False
    for what, mutate in _mutations():
        damaged = descriptor_pb2.FileDescriptorSet.FromString(data)
        mutate(damaged)
        failures = check(damaged.SerializeToString()).failures
        print(f"self-test: {what}: {'caught' if failures else 'MISSED'}")
        ok = ok and bool(failures)
    # Nothing comparable at all (here: only the cosi package, which v1.6 lacks) must fail too.
    only_cosi = descriptor_pb2.FileDescriptorSet.FromString(data)
    keep = [f for f in only_cosi.file if f.package in ("cosi.resource", "google.protobuf")]
    del only_cosi.file[:]
    only_cosi.file.extend(keep)
    empty = check(only_cosi.SerializeToString())
    nothing = empty.counts["fields"] == 0
    print(f"self-test: a set with nothing to compare: {'caught' if nothing else 'MISSED'}")
    ok = ok and nothing
    print("self-test passed" if ok else "self-test FAILED")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    args = argv[1:]
    testing = args[:1] == ["--self-test"]
    if testing:
        args = args[1:]
    if len(args) != 1:
        print(f"usage: {argv[0]} [--self-test] DESCRIPTOR_SET.bin", file=sys.stderr)
        return 2
    with open(args[0], "rb") as f:
        data = f.read()
    if testing:
        return self_test(data)
    report = check(data)

    print(f"compared against {REFERENCE}:")
    for what, count in report.counts.items():
        print(f"  {count:4d} {what}")
    print(f"not in v1.6 ({len(report.not_in_reference)}):")
    for line in report.not_in_reference:
        print(f"  {line}")
    if report.failures:
        print(f"MISMATCHES ({len(report.failures)}):")
        for line in report.failures:
            print(f"  {line}")
        return 1
    if report.counts["fields"] == 0 or report.counts["enum values"] == 0:
        print("nothing was compared: is the descriptor set right, and the package installed?")
        return 1
    print("all compared fields, enum values and methods agree with Talos v1.6")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
