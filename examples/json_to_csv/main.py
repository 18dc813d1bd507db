import csv
import json
import sys

args = json.load(sys.stdin)
columns = []
for row in args["rows"]:
    for k in row:
        if k not in columns:
            columns.append(k)
with open(args["out"], "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=columns)
    w.writeheader()
    for row in args["rows"]:
        w.writerow({k: (json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in row.items()})
print(json.dumps({"ok": True, "data": {"path": args["out"], "rows": len(args["rows"]), "columns": columns}}))
