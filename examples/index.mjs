// The canonical example tools: each is a directory with tool.json (the spec without its impl)
// and one implementation file (main.py, main.js or main.sh). `loadExample(name)` returns the
// whole spec, ready for forgeTool / forge_tool.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

/** Names of the example tools. */
export const EXAMPLES = readdirSync(here, { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .map((d) => d.name)
  .sort();

/** The full spec of example `name` (tool.json plus its impl file). */
export function loadExample(name) {
  const dir = join(here, name);
  const spec = JSON.parse(readFileSync(join(dir, 'tool.json'), 'utf8'));
  const impl = readdirSync(dir).find((f) => f.startsWith('main.'));
  if (!impl) throw new Error(`example ${name} has no main.* file`);
  return { ...spec, impl: readFileSync(join(dir, impl), 'utf8') };
}
