// The tools the soak forges: python3 and bash, cached and not, one writing an artifact and a log
// event, one whose input or output fails validation now and then, one that sleeps (for clients
// that leave mid-call). Each asks for the default 30 s: on a loaded machine a cold run can wait for
// a CPU longer than a tool's own small budget, and a timeout should mean a stall, not a busy host.

import { loadExample } from '../../../examples/index.mjs';

/** The uncached python tool's script; the raw bwrap baseline runs the same file. */
export const ECHO_PY = 'import json, sys\nx = json.load(sys.stdin)\nprint(json.dumps({"ok": True, "data": {"echo": x}}))\n';

/** The wire name of a forge name (a dot is not allowed there: soak.fib is soak__fib). */
export const wire = (name) => name.replaceAll('.', '__');

const fib = loadExample('fib');

/** The specs, ready for forge_tool. */
export const TOOLS = {
  fib: { ...fib, name: 'soak.fib', meta: { ...fib.meta, timeout_ms: 30_000 } },
  echo: {
    name: 'soak.echo',
    description: 'answers with its input (uncached: a sandboxed python run each call)',
    runtime: 'python3',
    input_schema: { type: 'object', properties: { i: { type: 'integer' }, s: { type: 'string' } } },
    impl: ECHO_PY,
  },
  report: {
    name: 'soak.report',
    description: 'writes a 9-line report.txt artifact and one log event',
    runtime: 'bash',
    input_schema: { type: 'object', properties: { n: { type: 'integer', minimum: 0 } }, required: ['n'] },
    impl: [
      'read -r input',
      "n=$(printf '%s' \"$input\" | tr -dc '0-9')",
      `echo '{"log": "info", "message": "writing the report"}' >&3`,
      '{ echo "report $n"; for i in 1 2 3 4 5 6 7 8; do echo "line $i of report $n"; done; } > /forge/artifacts/report.txt',
      `printf '{"ok": true, "data": {"n": %s, "lines": 9}, "meta": {"files": ["report.txt"]}}\\n' "$n"`,
      '',
    ].join('\n'),
  },
  check: {
    name: 'soak.check',
    description: 'parity of n; a multiple of 7 breaks its output schema, a multiple of 11 is its own refusal',
    runtime: 'bash',
    input_schema: {
      type: 'object',
      properties: { n: { type: 'integer', minimum: 0, maximum: 1000000 } },
      required: ['n'],
      additionalProperties: false,
    },
    output_schema: {
      type: 'object',
      properties: { n: { type: 'integer' }, parity: { enum: ['even', 'odd'] } },
      required: ['n', 'parity'],
    },
    impl: [
      'read -r input',
      "n=$(printf '%s' \"$input\" | tr -dc '0-9')",
      `if [ $((n % 7)) -eq 0 ]; then printf '{"ok": true, "data": {"n": "%s", "parity": "seven"}}\\n' "$n"; exit 0; fi`,
      `if [ $((n % 11)) -eq 0 ]; then printf '{"ok": false, "error": {"kind": "multiple_of_11", "message": "%s"}}\\n' "$n"; exit 0; fi`,
      'if [ $((n % 2)) -eq 0 ]; then p=even; else p=odd; fi',
      `printf '{"ok": true, "data": {"n": %s, "parity": "%s"}}\\n' "$n" "$p"`,
      '',
    ].join('\n'),
  },
  slow: {
    name: 'soak.slow',
    description: 'sleeps half a second (only the clients that leave mid-call call it)',
    runtime: 'bash',
    input_schema: { type: 'object' },
    impl: 'read -r x\nsleep 0.5\necho \'{"ok": true, "data": {}}\'\n',
  },
};

/**
 * The expected outcome of soak.check for input `n` (an integer): output_schema_failed for a
 * multiple of 7, the tool's own multiple_of_11 for one of 11, else ok.
 */
export const checkOutcome = (n) => (n % 7 === 0 ? 'output_schema_failed' : n % 11 === 0 ? 'multiple_of_11' : 'ok');
