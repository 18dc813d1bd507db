import json
import sys

n = json.load(sys.stdin)["n"]
a, b = 0, 1
for _ in range(n):
    a, b = b, a + b
print(json.dumps({"ok": True, "data": {"n": n, "fib": str(a)}}))
