#!/usr/bin/env python3
"""Independent checker of forge-audit-chain tree checkpoints and proofs (SPEC.md section 9).

Written from SPEC.md sections 9, 9.1 and 9.2 and RFC 9162 section 2.1 alone, in Python 3.11 with
only the standard library (Ed25519 from verify_log.py, itself written from RFC 8032).

Usage: python3 verify_proof.py < request.json

The request is one JSON object: {"vkey": verifier key, "checkpoint": signed note, and
"inclusion": {"line", "index", "proof": [hex]}, or "consistency": {"checkpoint": the older signed
note, "proof": [hex]}}. Prints one line of JSON, {"ok": true, "origin", "size"} or
{"ok": false, "reason"}; exit 0 when ok, 1 when not, 2 on a malformed request.
"""
import base64
import hashlib
import json
import os
import sys

sys.dont_write_bytecode = True  # nothing left beside the script
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from verify_log import ed25519_verify  # noqa: E402

EM_DASH = "\u2014 "


class Bad(Exception):
    pass


def node(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def leaf(line):
    return hashlib.sha256(b"\x00" + line).digest()


def parse_vkey(vkey):
    """SPEC 9.1: name+<8 hex>+base64(0x01 || 32-byte key); the ID must be the key's."""
    name, _, rest = vkey.partition("+")
    hex_id, _, b64 = rest.partition("+")
    raw = base64.b64decode(b64, validate=True)
    if not name or len(hex_id) != 8 or len(raw) != 33 or raw[0] != 1:
        raise Bad("malformed verifier key")
    want = int.from_bytes(hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4], "big")
    if int(hex_id, 16) != want:
        raise Bad("verifier key id mismatch")
    return name, want, raw[1:]


def open_note(msg, vkey):
    """SPEC 9.1: text, blank line, signature lines; a known key's signature must verify."""
    name, kid, pub = parse_vkey(vkey)
    if any(ord(c) < 0x20 and c != "\n" for c in msg):
        raise Bad("control character in note")
    split = msg.rfind("\n\n")
    if split < 0 or not msg.endswith("\n"):
        raise Bad("no signature block")
    text, sigs = msg[: split + 1], msg[split + 2 :]
    signed = False
    for line in sigs[:-1].split("\n"):
        if not line.startswith(EM_DASH):
            raise Bad("bad signature line")
        who, _, b64 = line[len(EM_DASH) :].partition(" ")
        raw = base64.b64decode(b64, validate=True)
        if len(raw) < 5:
            raise Bad("short signature")
        if who == name and int.from_bytes(raw[:4], "big") == kid:
            if not ed25519_verify(pub, text.encode(), raw[4:]):
                raise Bad("signature does not verify")
            signed = True
    if not signed:
        raise Bad("not signed by the key")
    lines = text[:-1].split("\n")
    if len(lines) < 3 or not lines[1].isdigit() or (lines[1] != "0" and lines[1].startswith("0")):
        raise Bad("not a tree checkpoint")
    root = base64.b64decode(lines[2], validate=True)
    if len(root) != 32:
        raise Bad("tree head is not 32 bytes")
    return lines[0], int(lines[1]), root


def check_inclusion(index, size, leaf_hash, proof, root):
    """RFC 9162 2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf_hash
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def check_consistency(first, second, first_root, second_root, proof):
    """RFC 9162 2.1.4.2 (the empty tree and the tree itself are prefixes too)."""
    if first > second:
        return False
    if first == second:
        return not proof and first_root == second_root
    if first == 0:
        return not proof and first_root == hashlib.sha256(b"").digest()
    if first & (first - 1) == 0:
        proof = [first_root] + proof
    if not proof:
        return False
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_root and sr == second_root


def main():
    try:
        req = json.load(sys.stdin)
        origin, size, root = open_note(req["checkpoint"], req["vkey"])
        if "inclusion" in req:
            inc = req["inclusion"]
            proof = [bytes.fromhex(h) for h in inc["proof"]]
            ok = check_inclusion(inc["index"], size, leaf(inc["line"].encode()), proof, root)
            reason = "inclusion proof does not check"
        else:
            con = req["consistency"]
            old_origin, old_size, old_root = open_note(con["checkpoint"], req["vkey"])
            if old_origin != origin:
                raise Bad("checkpoints of two logs")
            proof = [bytes.fromhex(h) for h in con["proof"]]
            ok = check_consistency(old_size, size, old_root, root, proof)
            reason = "consistency proof does not check"
    except Bad as e:
        print(json.dumps({"ok": False, "reason": str(e)}))
        return 1
    except (KeyError, ValueError, TypeError) as e:
        print(json.dumps({"ok": False, "reason": "malformed request: %s" % e}))
        return 2
    if not ok:
        print(json.dumps({"ok": False, "reason": reason}))
        return 1
    print(json.dumps({"ok": True, "origin": origin, "size": size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
