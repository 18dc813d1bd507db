import hashlib
import json
import os
import sys

args = json.load(sys.stdin)
token = os.environ.get("API_TOKEN", "")
print(json.dumps({"ok": True, "data": {
    "service": args["service"],
    "configured": bool(token),
    "length": len(token),
    "fingerprint": hashlib.sha256(token.encode()).hexdigest()[:12]}}))
