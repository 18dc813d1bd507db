#!/usr/bin/env python3
"""Independent verifier for the forge-audit-chain log format, version 1.

Written from SPEC.md alone (no reference source was read), in Python 3.11 with only the
standard library, to show that the specification is implementable from the document.

Usage: python3 verify_log.py <log-path> [--key-pub <pem-file>]

Prints one line of JSON: {"ok", "entries", "head"[, "first_bad": {"seq", "line", "reason",
"file"}]}. Exit code 0 when ok, 1 when a violation is found, 2 on usage or I/O errors.

Files are streamed line by line in binary mode; entry hashes are taken over the bytes as they
are on disk. Ed25519 verification is implemented below from RFC 8032, section 5.1.
"""
import argparse
import base64
import hashlib
import json
import os
import re
import sys

GENESIS = "0" * 64
MAX_INT = 2**53 - 1
SUFFIX = re.compile(rb',"hash":"([0-9a-f]{64})"\}\n')  # SPEC 2.1: exactly 76 bytes
HEX64 = re.compile(r"[0-9a-f]{64}\Z")
HEX16 = re.compile(r"[0-9a-f]{16}\Z")
TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\Z")
# SPEC 4 step 4: the fixed head and tail of an entry body, checked on the bytes.
BODY_HEAD = re.compile(
    rb'\{"seq":([1-9][0-9]*),"ts":"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z'
    rb'","type":"([A-Za-z0-9][A-Za-z0-9_.:/-]{0,127})","data":')
BODY_TAIL = re.compile(rb',"prev":"([0-9a-f]{64})"')  # exactly 74 bytes

# ---------------------------------------------------------------- Ed25519 (RFC 8032, 5.1)
P = 2**255 - 19
Q = 2**252 + 27742317777372353535851937790883648493  # the group order, "L" in the RFC
D = -121665 * pow(121666, -1, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def _add(p1, p2):
    """Point addition in extended coordinates (5.1.4); also valid for doubling."""
    x1, y1, z1, t1 = p1
    x2, y2, z2, t2 = p2
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = 2 * t1 * t2 * D % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _mul(s, pt):
    """[s]pt by double-and-add."""
    acc = (0, 1, 1, 0)  # the neutral element
    while s:
        if s & 1:
            acc = _add(acc, pt)
        pt = _add(pt, pt)
        s >>= 1
    return acc


def _decode_point(b):
    """Point decoding (5.1.3); None when the 32 bytes are not a valid encoding."""
    if len(b) != 32:
        return None
    y = int.from_bytes(b, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    if y >= P:
        return None
    u, v = (y * y - 1) % P, (D * y * y + 1) % P
    x = u * pow(v, 3, P) * pow(u * pow(v, 7, P), (P - 5) // 8, P) % P
    if v * x * x % P == (-u) % P and u != 0:
        x = x * SQRT_M1 % P
    if v * x * x % P != u:
        return None
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = P - x
    return (x, y, 1, x * y % P)


BASE = _decode_point((4 * pow(5, -1, P) % P).to_bytes(32, "little"))  # B = (+x, 4/5)


def ed25519_verify(pub, msg, sig):
    """Verify (5.1.7): decode R and A, k = SHA-512(R || A || M) mod L, check [S]B = R + [k]A."""
    if len(sig) != 64:
        return False
    a, r, s = _decode_point(pub), _decode_point(sig[:32]), int.from_bytes(sig[32:], "little")
    if a is None or r is None or s >= Q:
        return False
    k = int.from_bytes(hashlib.sha512(sig[:32] + pub + msg).digest(), "little") % Q
    x1, y1, z1, _ = _mul(s, BASE)
    x2, y2, z2, _ = _add(r, _mul(k, a))
    return (x1 * z2 - x2 * z1) % P == 0 and (y1 * z2 - y2 * z1) % P == 0


def read_public_key(pem_path):
    """PEM `PUBLIC KEY` -> raw 32-byte key (SPEC 5.3). Raises ValueError when malformed."""
    with open(pem_path, "rb") as f:
        text = f.read(65536).decode("ascii")
    m = re.search(r"-----BEGIN PUBLIC KEY-----(.*?)-----END PUBLIC KEY-----", text, re.S)
    if not m:
        raise ValueError("no PUBLIC KEY block")
    der = base64.b64decode("".join(m.group(1).split()), validate=True)
    # SPEC ambiguity: 5.3 only says "44 bytes, the last 32 are the raw key"; the fixed RFC 8410 DER prefix is not checked.
    if len(der) != 44:
        raise ValueError("DER is %d bytes, expected 44" % len(der))
    return der[12:]


def key_id(raw):
    return hashlib.sha256(raw).hexdigest()[:16]  # SPEC 5.1: first 8 bytes of SHA-256, hex


# ---------------------------------------------------------------- JSON helpers
def _no_constant(name):
    raise ValueError("not JSON: " + name)  # Python would otherwise accept NaN / Infinity


def _int(s):
    # Integers beyond Python's digit limit become floats (never a valid count or number anyway).
    return int(s) if len(s) < 4000 else float(s)


def parse_json(raw):
    """UTF-8 bytes -> value (repeated keys: last one wins), or raise ValueError."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant, parse_int=_int)
    except (UnicodeDecodeError, RecursionError) as e:
        raise ValueError(str(e))


# RFC 8259 tokens, on bytes (UTF-8 validity is checked separately).
_WS = re.compile(rb"[ \t\n\r]*")
_STR = re.compile(rb'"(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9A-Fa-f]{4})*+"')
_NUM = re.compile(rb"-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?(?:[eE][+-]?[0-9]++)?")
_LIT = re.compile(rb"true|false|null")


def scan_json_value(b, i, end):
    """Check that b[i:end] is exactly one RFC 8259 JSON value with optional surrounding whitespace.

    Iterative, so nesting depth is not limited by Python's recursion limit; NaN, Infinity and
    other extensions are not accepted. Returns the members of a top-level object as
    {decoded key: (start, stop) of the value's bytes} (a repeated key: the last one), or None
    when the value is not an object. Raises ValueError when the bytes are not one JSON value.
    """
    def ws(j):
        return _WS.match(b, j, end).end()

    def at(j):
        return b[j:j + 1] if j < end else b""

    stack, members, key, vstart = [], None, None, 0
    i = ws(i)
    want = "value"
    while True:
        if want == "value":
            c = at(i)
            if c == b"{" or c == b"[":
                stack.append(c)
                if len(stack) == 1 and c == b"{":
                    members = {}
                i = ws(i + 1)
                if at(i) == (b"}" if c == b"{" else b"]"):
                    stack.pop()
                    i += 1
                    want = "after"
                else:
                    want = "key" if c == b"{" else "value"
                continue
            m = (_STR if c == b'"' else _NUM if c in b"-0123456789" and c else _LIT).match(b, i, end)
            if not c or not m:
                raise ValueError("not a JSON value at byte %d" % i)
            i, want = m.end(), "after"
        elif want == "key":
            m = _STR.match(b, i, end)
            if not m:
                raise ValueError("expected a string key at byte %d" % i)
            i = ws(m.end())
            if at(i) != b":":
                raise ValueError("expected ':' at byte %d" % i)
            if len(stack) == 1:  # a member of the top-level object: remember where its value is
                key, vstart = json.loads(m.group().decode("utf-8")), ws(i + 1)
            i, want = ws(i + 1), "value"
        else:  # after a complete value
            if len(stack) == 1 and key is not None:
                members[key] = (vstart, i)  # a repeated key: the last one
                key = None
            i = ws(i)
            if not stack:
                break
            top, c = stack[-1], at(i)
            if c == b",":
                i = ws(i + 1)
                want = "key" if top == b"{" else "value"
            elif c == (b"}" if top == b"{" else b"]"):
                stack.pop()
                i += 1
            else:
                raise ValueError("expected ',' or a closing bracket at byte %d" % i)
    if i != end:
        raise ValueError("extra bytes after the JSON value at byte %d" % i)
    return members


def is_int(v, lo, hi=MAX_INT):
    # SPEC ambiguity: checkpoint counts are read as integer literals; 1.0, 1e0 (or true) are rejected.
    return type(v) is int and lo <= v <= hi


# ---------------------------------------------------------------- checkpoints (SPEC 5)
def parse_checkpoint(raw):
    """One complete line of L.checkpoints -> dict, or None when it is not a checkpoint (5.1)."""
    try:
        cp = parse_json(raw)
    except ValueError:
        return None
    if not isinstance(cp, dict):
        return None
    # SPEC 5.1: any field order; a repeated field takes its last value (json.loads does that);
    # an unknown field is an error; key_id and sig together or not at all.
    base = {"entries", "head", "segment", "offset", "time"}
    if set(cp) not in (base, base | {"key_id", "sig"}):
        return None
    if not (is_int(cp["entries"], 0) and is_int(cp["segment"], 1) and is_int(cp["offset"], 0)):
        return None
    if not (isinstance(cp["head"], str) and HEX64.match(cp["head"])):
        return None
    # SPEC ambiguity: "RFC 3339 UTC with milliseconds" for time is enforced literally, by this shape.
    if not (isinstance(cp["time"], str) and TIME.match(cp["time"])):
        return None
    # SPEC 5.1: a checkpoint of 0 entries has the genesis head, segment 1 and offset 0.
    if cp["entries"] == 0 and (cp["head"], cp["segment"], cp["offset"]) != (GENESIS, 1, 0):
        return None
    if "key_id" in cp:
        if not (isinstance(cp["key_id"], str) and HEX16.match(cp["key_id"])):
            return None
        sig = cp["sig"]
        # SPEC 5.1: sig is canonical padded base64 of 64 bytes (else bad_checkpoint).
        try:
            if (not isinstance(sig, str) or not sig.isascii()
                    or base64.b64encode(base64.b64decode(sig, validate=True)).decode() != sig):
                return None
        except ValueError:
            return None
        if len(base64.b64decode(sig)) != 64:
            return None
    return cp


def signed_note(cp):
    return ("forge-audit-chain checkpoint v1\nentries %d\nhead %s\nsegment %d %d\ntime %s\n"
            % (cp["entries"], cp["head"], cp["segment"], cp["offset"], cp["time"])).encode("utf-8")


def read_checkpoints(path, pub):
    """Read L.checkpoints before the walk (5.4). Returns (used, fault or None)."""
    name = os.path.basename(path)
    used, lineno = [], 0
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        f = None
    if f is not None:
        with f:
            for raw in iter(f.readline, b""):
                if not raw.endswith(b"\n"):
                    break  # interrupted last write: ignored
                lineno += 1
                cp = parse_checkpoint(raw[:-1])  # an empty line is not a checkpoint
                # SPEC ambiguity: bad_checkpoint and signature_invalid are found in one pass, first bad line wins.
                if cp is None:
                    return used, (0, lineno, "bad_checkpoint", name)  # SPEC 5.4: always entry 0
                if pub is None:
                    used.append(cp)
                elif cp.get("key_id") == key_id(pub):
                    if not ed25519_verify(pub, signed_note(cp), base64.b64decode(cp["sig"])):
                        return used, (cp["entries"], lineno, "signature_invalid", name)
                    used.append(cp)
                # else: unsigned or another key's checkpoint, ignored in key mode
    if pub is not None and not used:
        # SPEC 5.4: "no checkpoint signed by this key", at entry 0, line 0 of L.checkpoints.
        return used, (0, 0, "signature_invalid", name)
    return used, None


# ---------------------------------------------------------------- entries (SPEC 4)
def check_entry(raw):
    """Steps 2-4 for a line that ends with a line feed.

    Returns (reason, entry, hash); entry is {"seq", "type", "prev", "data"} where data holds the
    top-level members of an object `data` ({key: value bytes}) or None for any other value.
    """
    if len(raw) < 77 or not SUFFIX.fullmatch(raw, len(raw) - 76):
        return "bad_json", None, None
    digest = raw[-67:-3].decode("ascii")
    body = raw[:-76]
    if hashlib.sha256(body).hexdigest() != digest:
        return "hash_mismatch", None, None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bad_json", None, None
    head = BODY_HEAD.match(body)
    tail_at = len(body) - 74
    if (not head or tail_at < head.end() or not BODY_TAIL.fullmatch(body, tail_at)
            or len(head.group(1)) > 16 or int(head.group(1)) > MAX_INT):
        return "bad_json", None, None
    try:
        members = scan_json_value(body, head.end(), tail_at)
    except ValueError:
        return "bad_json", None, None
    data = None if members is None else {k: body[a:z] for k, (a, z) in members.items()}
    e = {"seq": int(head.group(1)), "type": head.group(2).decode("ascii"),
         "prev": body[-65:-1].decode("ascii"), "data": data}
    return None, e, digest


def data_segment_is(e, n):
    """SPEC 4: data.segment is the JSON number n (compared as a number; true or "2" never match)."""
    v = (e["data"] or {}).get("segment")
    # A JSON number compares by value, as a binary64 double would: 2, 2.0 and 2e0 all equal 2.
    return v is not None and _NUM.fullmatch(v) is not None and float(v) == n


class Fault(Exception):
    def __init__(self, reason, file, line):
        super().__init__(reason)
        self.reason, self.file, self.line = reason, file, line


def sealed_numbers(directory, base):
    pat = re.compile(re.escape(base) + r"\.([0-9]{6,})\Z")
    nums = set()
    for name in os.listdir(directory):
        m = pat.match(name)
        # SPEC 1: the number zero-padded to six digits (unpadded from seven digits); n >= 1.
        # Other digit suffixes (L.000000, L.0000001) are not segments and are ignored.
        if m and int(m.group(1)) >= 1 and m.group(1) == "%06d" % int(m.group(1)):
            nums.add(int(m.group(1)))
    return nums


def walk(path, used):
    """Walk every segment; returns (count, head) or raises Fault with self.seq/self.prev set."""
    directory, base = os.path.split(path)
    directory = directory or "."
    by_entry = {}
    for cp in used:
        by_entry.setdefault(cp["entries"], []).append(cp)
    max_cp = max((cp["entries"] for cp in used), default=0)
    sealed = sealed_numbers(directory, base)
    k = max(sealed, default=0)
    state = {"seq": 1, "prev": GENESIS}

    def fault(reason, file, line):
        f = Fault(reason, file, line)
        f.seq, f.prev = state["seq"], state["prev"]
        return f

    for n in range(1, k + 2):
        active = n == k + 1
        name = base if active else "%s.%06d" % (base, n)
        if not active and n not in sealed:
            # SPEC 4: a gap is reported at expected_seq, naming the missing file, line 0.
            raise fault("segment_missing", name, 0)
        lineno, offset, last = 0, 0, None
        try:
            f = open(os.path.join(directory, name), "rb")
        except FileNotFoundError:
            # SPEC 4: a missing active L counts as an empty segment.
            if not active:
                raise
            f = None
        if f is not None:
            with f:
                for raw in iter(f.readline, b""):
                    lineno += 1
                    if not raw.endswith(b"\n"):
                        if not active:
                            raise fault("bad_json", name, lineno)
                        # 5.4: a torn line that a checkpoint covers is truncated, not torn_tail.
                        raise fault("truncated" if max_cp >= state["seq"] else "torn_tail", name, lineno)
                    reason, e, digest = check_entry(raw)
                    if reason:
                        raise fault(reason, name, lineno)
                    # SPEC 4 step 5: the first entry of a segment is a header exactly when n > 1.
                    if lineno == 1 and n > 1 and not (
                            e["type"] == "audit.segment" and data_segment_is(e, n)):
                        raise fault("segment_missing", name, lineno)
                    if lineno == 1 and n == 1 and e["type"] == "audit.segment":
                        raise fault("segment_missing", name, lineno)
                    if e["seq"] != state["seq"]:
                        raise fault("seq_gap", name, lineno)
                    if e["prev"] != state["prev"]:
                        raise fault("broken_link", name, lineno)
                    offset += len(raw)
                    # SPEC 5.4: the checkpoint checks run once steps 1-7 have passed for the entry.
                    for cp in by_entry.get(e["seq"], ()):
                        if (cp["head"], cp["segment"], cp["offset"]) != (digest, n, offset):
                            raise fault("rollback", name, lineno)
                    state["seq"], state["prev"], last = e["seq"] + 1, digest, e
        # SPEC 4: truncated when the last entry is not audit.sealed for n, or there is none.
        if not active and not (last is not None and last["type"] == "audit.sealed"
                               and data_segment_is(last, n)):
            raise fault("truncated", name, lineno + 1)
        if active and max_cp >= state["seq"]:
            raise fault("truncated", name, lineno + 1)
    return state["seq"] - 1, state["prev"]


def main(argv):
    ap = argparse.ArgumentParser(description="Verify a forge-audit-chain v1 log (SPEC.md sections 4-5).")
    ap.add_argument("log")
    ap.add_argument("--key-pub", metavar="PEM")
    args = ap.parse_args(argv)
    directory = os.path.dirname(args.log) or "."
    if not os.path.isdir(directory):
        print("error: directory %r does not exist" % directory, file=sys.stderr)
        return 2
    try:
        pub = read_public_key(args.key_pub) if args.key_pub else None
        used, cp_fault = read_checkpoints(args.log + ".checkpoints", pub)
        result = {"ok": True, "entries": 0, "head": GENESIS}
        # SPEC 5.4: checkpoint-file verdicts come before any chain fault; the walk does not run.
        if cp_fault:
            seq, line, reason, name = cp_fault
            result.update(ok=False, first_bad={"seq": seq, "line": line, "reason": reason, "file": name})
        else:
            try:
                result["entries"], result["head"] = walk(args.log, used)
            except Fault as f:
                result.update(ok=False, entries=f.seq - 1, head=f.prev,
                              first_bad={"seq": f.seq, "line": f.line, "reason": f.reason, "file": f.file})
    except (OSError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
