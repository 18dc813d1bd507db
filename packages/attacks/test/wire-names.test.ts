// Invariant 1's listings and invariant 7's wire names (docs/security.md): over MCP a tool is
// reached by its wire name (dots become `__`), which is not injective (`a.b__c` and `a__b.c` are
// both `a__b__c`). Whatever is forged, in whatever order, the tools a client is offered have
// distinct wire names, and a forge that would collide is refused, naming the other tool.
import { wireName } from '@forge/registry';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { py, target } from './helpers.js';

describe('wire names over everything listed', () => {
  it('property: after any sequence of forges, the listed tools’ wire names are distinct (case folded), and every collision was refused as name_taken', async () => {
    const t = await target({ userPolicy: { breakers: { per_tool_rpm: 1e9, per_session_forge_count: 1e9 } } });
    let run = 0;
    const seg = fc.constantFrom('a', 'b', 'a__b', 'b__a', 'A', 'a_');
    const name = fc.tuple(seg, fc.constantFrom('.', '__'), seg).map(([x, sep, y]) => `${x}${sep}${y}`);
    await fc.assert(
      fc.asyncProperty(fc.array(name, { minLength: 2, maxLength: 5 }), async (names) => {
        const prefix = `p${run++}`;
        for (const n of names) {
          const r = await t.forge.forgeTool(py(`${prefix}.${n}`, 'print(json.dumps({"ok": True, "data": 1}))'));
          if (!r.ok) expect(['name_taken', 'validation_failed'], `${prefix}.${n}: ${r.message}`).toContain(r.kind);
        }
        const listed = (await t.forge.listTools())
          .filter((l) => l.tool.name.startsWith(`${prefix}.`) && l.wireConflict === undefined)
          .map((l) => wireName(l.tool.name).toLowerCase());
        expect(new Set(listed).size).toBe(listed.length);
      }),
      { numRuns: 25 },
    );
  });
});
