#!/usr/bin/env python3
"""Drive a talosbox node with a Talos client that nobody here wrote.

The client is the PyPI package `talos-linux-api-v1-6-0`: betterproto classes and grpclib
stubs generated from Talos v1.6's own .proto files, over Python's ssl (OpenSSL), so neither
the TLS stack nor the protobuf code is ours or Go's. `run-client-test` beside this file sets
up a node and calls this script; run it by hand as

    python_client.py --endpoint 127.0.4.1:50000 --talosconfig talosconfig --config controlplane.yaml
    python_client.py --endpoint 127.0.4.1:50000 --config controlplane.yaml --maintenance

Checks (one "ok: ..." line each; the first failure exits 1 with a message on stderr):

  * Version: the tag starts with "v" and the platform is present.
  * Hostname (not in --maintenance): non-empty.
  * ServiceList (not in --maintenance): "apid" is there and Running.
  * ApplyConfiguration, dry_run=True, mode AUTO, with the --config text: the reply's
    mode_details starts with "Dry run summary:" and has "Config diff:" or "No changes." (in
    --maintenance, Talos's own "Node is running in maintenance mode and does not have a
    config yet." is accepted too: real Talos has no config to diff against there).
  * With --state-raw FILE (not in --maintenance): `/cosi.resource.State/Get` for
    runtime/MachineStatuses.runtime.talos.dev/machine, with a request encoded by hand and a
    pass-through codec, so no generated code is involved at all; the raw reply is written to
    FILE and decoded with `protoc --decode_raw`, and the field numbers of the COSI
    specification (GetResponse.resource=1; Resource.metadata=1, spec=2; Metadata.namespace=1,
    type=2, id=3, version=4; Spec.yaml_spec=2) must hold what they should.

Mutual TLS as talosctl does it: the CA, client certificate and key of the talosconfig's
current context (base64 PEM). The server's certificate is verified against that CA and
matched against the endpoint's IP address (apid's certificate carries IP SANs). In
--maintenance the node has only a self-signed certificate and asks for no client certificate,
so, like `talosctl --insecure`, nothing is presented and nothing is verified.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import re
import ssl
import subprocess
import sys
import tempfile
from typing import Any

import grpclib.client
import grpclib.const
import grpclib.encoding.base
import grpclib.exceptions
import yaml
from betterproto.lib.google.protobuf import Empty
from grpclib.client import Channel
from talos_linux_api.v1_6_0.machine import (
    ApplyConfigurationRequest,
    ApplyConfigurationRequestMode,
    MachineServiceStub,
)

TIMEOUT = 20.0


class Failure(Exception):
    pass


def ok(what: str) -> None:
    print(f"ok: {what}", flush=True)


def check(cond: bool, what: str, detail: Any = "") -> None:
    if not cond:
        raise Failure(f"{what}: {detail}" if detail != "" else what)


# --- TLS ---------------------------------------------------------------------------------------


def pkcs8_pem(pem: str) -> str:
    """talosctl writes an Ed25519 key as "BEGIN ED25519 PRIVATE KEY" around what is a plain
    PKCS#8 body (Go's crypto/x509 and real Talos do the same); OpenSSL wants "PRIVATE KEY"."""
    return re.sub(r"-----(BEGIN|END) ED25519 PRIVATE KEY-----", r"-----\1 PRIVATE KEY-----", pem)


def load_context(path: str) -> dict[str, str]:
    with open(path) as f:
        cfg = yaml.safe_load(f)
    name = cfg.get("context")
    check(bool(name), f"{path}: no current context")
    ctx = (cfg.get("contexts") or {}).get(name)
    check(ctx is not None, f"{path}: context {name!r} is not under contexts")
    out = {}
    for key in ("ca", "crt", "key"):
        check(bool(ctx.get(key)), f"{path}: context {name!r} has no {key}")
        out[key] = base64.b64decode(ctx[key]).decode()
    return out


def mtls_context(talosconfig: str, tmp: str) -> ssl.SSLContext:
    pems = load_context(talosconfig)
    crt = os.path.join(tmp, "client.crt")
    key = os.path.join(tmp, "client.key")
    with open(crt, "w") as f:
        f.write(pems["crt"])
    with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(pkcs8_pem(pems["key"]))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verify_mode CERT_REQUIRED, check_hostname on
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cadata=pems["ca"])
    ctx.load_cert_chain(crt, key)
    ctx.set_alpn_protocols(["h2"])
    return ctx


def insecure_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["h2"])
    return ctx


# --- MachineService through the generated stubs -------------------------------------------------


async def check_version(svc: MachineServiceStub) -> None:
    resp = await svc.version(Empty(), timeout=TIMEOUT)
    check(len(resp.messages) == 1, "Version: one message expected", resp.to_dict())
    v = resp.messages[0]
    check(v.version.tag.startswith("v"), "Version: tag should start with 'v'", repr(v.version.tag))
    check(bool(v.platform.name) or bool(v.platform.mode), "Version: platform missing", v.to_dict())
    ok(f"Version: tag {v.version.tag}, platform {v.platform.name}/{v.platform.mode}, os {v.version.os}/{v.version.arch}")


async def check_hostname(svc: MachineServiceStub) -> None:
    resp = await svc.hostname(Empty(), timeout=TIMEOUT)
    check(len(resp.messages) == 1, "Hostname: one message expected", resp.to_dict())
    name = resp.messages[0].hostname
    check(bool(name), "Hostname: empty", resp.to_dict())
    ok(f"Hostname: {name}")


async def check_services(svc: MachineServiceStub) -> None:
    resp = await svc.service_list(Empty(), timeout=TIMEOUT)
    check(len(resp.messages) == 1, "ServiceList: one message expected", resp.to_dict())
    services = {s.id: s for s in resp.messages[0].services}
    check("apid" in services, "ServiceList: no apid", sorted(services))
    check(services["apid"].state == "Running", "ServiceList: apid not Running", services["apid"].to_dict())
    listed = ", ".join(f"{i}={s.state}" for i, s in sorted(services.items()))
    ok(f"ServiceList: apid Running ({listed})")


# What Talos's own maintenance server answers a dry run with (it has no config to diff against).
TALOS_MAINTENANCE_DRY_RUN = "Node is running in maintenance mode and does not have a config yet."


async def check_dry_run(svc: MachineServiceStub, config: bytes, maintenance: bool) -> None:
    req = ApplyConfigurationRequest(data=config, mode=ApplyConfigurationRequestMode.AUTO, dry_run=True)
    resp = await svc.apply_configuration(req, timeout=TIMEOUT)
    check(len(resp.messages) == 1, "ApplyConfiguration: one message expected", resp.to_dict())
    m = resp.messages[0]
    details = m.mode_details
    check(
        details.startswith("Dry run summary:"),
        "ApplyConfiguration dry run: mode_details should start with 'Dry run summary:'",
        repr(details[:300]),
    )
    wanted = ["Config diff:", "No changes."] + ([TALOS_MAINTENANCE_DRY_RUN] if maintenance else [])
    check(
        any(w in details for w in wanted),
        f"ApplyConfiguration dry run: mode_details has none of {wanted}",
        repr(details[:300]),
    )
    check(
        all(isinstance(w, str) for w in m.warnings),
        "ApplyConfiguration dry run: warnings should be strings",
        m.warnings,
    )
    lines = details.splitlines()
    summary = lines[1].strip() if len(lines) > 1 else ""
    shown = "no changes" if "No changes." in details else "a diff" if "Config diff:" in details else "no config yet"
    ok(f"ApplyConfiguration dry run (AUTO): mode {m.mode.name}, {len(m.warnings)} warning(s), {summary!r}, {shown}")


# --- cosi.resource.State/Get with no generated code ---------------------------------------------


class RawCodec(grpclib.encoding.base.CodecBase):
    """Messages are bytes both ways: what is sent is exactly what was encoded by hand."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> bytes:
        return bytes(data)


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def string_field(number: int, value: str) -> bytes:
    data = value.encode()
    return varint(number << 3 | 2) + varint(len(data)) + data


def get_request(namespace: str, type_: str, id_: str) -> bytes:
    # cosi.resource.GetRequest: namespace=1, type=2, id=3 (options=4 left out).
    return string_field(1, namespace) + string_field(2, type_) + string_field(3, id_)


def parse_decode_raw(text: str) -> list[tuple[str, Any]]:
    """`protoc --decode_raw` output as a tree: [(field number, scalar text | subtree)]."""
    stack: list[list[tuple[str, Any]]] = [[]]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
        elif line.endswith("{"):
            sub: list[tuple[str, Any]] = []
            stack[-1].append((line[:-1].strip(), sub))
            stack.append(sub)
        else:
            num, _, value = line.partition(": ")
            stack[-1].append((num, value))
    check(len(stack) == 1, "protoc --decode_raw: unbalanced output", text)
    return stack[0]


def unquote(value: str) -> str:
    """A protoc text-format string literal back to text (C escapes, octal bytes)."""
    check(value.startswith('"') and value.endswith('"'), "expected a string", value)
    return value[1:-1].encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")


def fields(tree: list[tuple[str, Any]], number: str) -> list[Any]:
    return [v for n, v in tree if n == number]


def one(tree: list[tuple[str, Any]], number: str, where: str, message: bool) -> Any:
    got = fields(tree, number)
    check(len(got) == 1, f"{where}: field {number} should occur once", f"found {len(got)} in {tree!r}"[:600])
    is_message = isinstance(got[0], list)
    check(is_message == message, f"{where}: field {number} should be a {'message' if message else 'scalar'}", got[0])
    return got[0]


async def check_state_get(channel_args: dict[str, Any], out_path: str) -> None:
    ns, typ, rid = "runtime", "MachineStatuses.runtime.talos.dev", "machine"
    request = get_request(ns, typ, rid)
    channel = Channel(codec=RawCodec(), **channel_args)
    try:
        method = grpclib.client.UnaryUnaryMethod(channel, "/cosi.resource.State/Get", bytes, bytes)
        raw = await method(request, timeout=TIMEOUT)
    finally:
        channel.close()
    with open(out_path, "wb") as f:
        f.write(raw)
    check(len(raw) > 0, "State/Get: empty reply")
    proc = subprocess.run(["protoc", "--decode_raw"], input=raw, capture_output=True)
    check(proc.returncode == 0, "protoc --decode_raw failed on the State/Get reply", proc.stderr.decode() + f" (bytes in {out_path})")
    text = proc.stdout.decode()
    tree = parse_decode_raw(text)

    where = f"State/Get reply ({out_path}; decoded: {text[:400]!r})"
    # GetResponse.resource = 1.
    check([n for n, _ in tree] == ["1"], f"{where}: GetResponse should hold only field 1 (resource)", [n for n, _ in tree])
    resource = one(tree, "1", "GetResponse", message=True)
    # Resource.metadata = 1, spec = 2.
    md = one(resource, "1", "Resource (metadata)", message=True)
    spec = one(resource, "2", "Resource (spec)", message=True)
    # Metadata.namespace = 1, type = 2, id = 3, version = 4.
    got_ns = unquote(one(md, "1", "Metadata.namespace", message=False))
    got_type = unquote(one(md, "2", "Metadata.type", message=False))
    got_id = unquote(one(md, "3", "Metadata.id", message=False))
    got_version = unquote(one(md, "4", "Metadata.version", message=False))
    check(got_ns == ns, "Metadata.namespace (field 1)", repr(got_ns))
    check(got_type == typ, "Metadata.type (field 2)", repr(got_type))
    check(got_id == rid, "Metadata.id (field 3)", repr(got_id))
    check(got_version.isdigit() and int(got_version) > 0, "Metadata.version (field 4) should be a positive decimal", repr(got_version))
    # Metadata.phase = 6 ("running"), created = 7 / updated = 8 (Timestamp{seconds = 1}), when sent.
    for phase in fields(md, "6"):
        check(unquote(phase) == "running", "Metadata.phase (field 6)", phase)
    for number, name in (("7", "created"), ("8", "updated")):
        for ts in fields(md, number):
            check(isinstance(ts, list), f"Metadata.{name} (field {number}) should be a Timestamp message", ts)
            secs = fields(ts, "1")
            check(len(secs) == 1 and secs[0].isdigit() and int(secs[0]) > 1_600_000_000,
                  f"Metadata.{name} (field {number}): Timestamp.seconds (field 1) should be a recent time", ts)
    # Spec.yaml_spec = 2.
    yaml_spec = unquote(one(spec, "2", "Spec.yaml_spec", message=False))
    check("stage:" in yaml_spec, "Spec.yaml_spec (field 2) should hold 'stage:'", repr(yaml_spec))
    stage = next((l.split(":", 1)[1].strip() for l in yaml_spec.splitlines() if l.startswith("stage:")), "")
    ok(f"State/Get {ns}/{typ}/{rid} (raw bytes, protoc --decode_raw): version {got_version}, stage {stage}, {len(raw)} bytes")


# --- main -------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> None:
    host, _, port = args.endpoint.rpartition(":")
    check(bool(host) and port.isdigit(), f"--endpoint wants HOST:PORT, not {args.endpoint!r}")
    with open(args.config, "rb") as f:
        config = f.read()
    with tempfile.TemporaryDirectory(prefix="talos-py-client-") as tmp:
        if args.maintenance:
            ssl_ctx = insecure_context()
        else:
            check(args.talosconfig is not None, "--talosconfig is needed unless --maintenance")
            ssl_ctx = mtls_context(args.talosconfig, tmp)
        # No ssl_target_name_override: asyncio sends the endpoint's host as server_hostname,
        # so the certificate is matched against the IP address itself.
        channel_args = {"host": host, "port": int(port), "ssl": ssl_ctx}
        channel = Channel(**channel_args)
        try:
            svc = MachineServiceStub(channel)
            await check_version(svc)
            if not args.maintenance:
                await check_hostname(svc)
                await check_services(svc)
            await check_dry_run(svc, config, args.maintenance)
        finally:
            channel.close()
        if args.state_raw and not args.maintenance:
            await check_state_get(channel_args, args.state_raw)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", required=True, help="HOST:PORT of apid, e.g. 127.0.4.1:50000")
    p.add_argument("--talosconfig", help="talosconfig whose current context holds ca/crt/key")
    p.add_argument("--config", required=True, help="machine config for the ApplyConfiguration dry run")
    p.add_argument("--maintenance", action="store_true", help="no client certificate, server not verified")
    p.add_argument("--state-raw", metavar="FILE", help="also call cosi.resource.State/Get raw; write the reply here")
    args = p.parse_args()
    mode = "maintenance" if args.maintenance else "mTLS"
    try:
        asyncio.run(run(args))
    except Failure as e:
        print(f"python_client ({mode}, {args.endpoint}): FAILED: {e}", file=sys.stderr)
        return 1
    except grpclib.exceptions.GRPCError as e:
        print(f"python_client ({mode}, {args.endpoint}): FAILED: gRPC error {e.status.name}: {e.message}", file=sys.stderr)
        return 1
    except (OSError, ssl.SSLError, asyncio.TimeoutError, grpclib.exceptions.StreamTerminatedError,
            grpclib.exceptions.ProtocolError) as e:
        # Connection refused, a certificate that does not verify, a handshake the server cut.
        print(f"python_client ({mode}, {args.endpoint}): FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
