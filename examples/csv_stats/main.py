import csv
import json
import sys

args = json.load(sys.stdin)
values, skipped = [], 0
try:
    with open(args["path"], newline="") as f:
        rows = csv.DictReader(f)
        if args["column"] not in (rows.fieldnames or []):
            print(json.dumps({"ok": False, "error": {"kind": "no_such_column",
                  "message": f'column {args["column"]!r} is not in the header {rows.fieldnames}'}}))
            sys.exit(0)
        for row in rows:
            try:
                values.append(float(row[args["column"]]))
            except (TypeError, ValueError):
                skipped += 1
except OSError as e:
    print(json.dumps({"ok": False, "error": {"kind": "unreadable", "message": str(e)}}))
    sys.exit(0)
n = len(values)
print(json.dumps({"ok": True, "data": {
    "column": args["column"], "count": n, "skipped": skipped,
    "mean": sum(values) / n if n else None,
    "min": min(values) if n else None, "max": max(values) if n else None}}))
