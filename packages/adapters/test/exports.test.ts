import { expect, it } from 'vitest';

/**
 * Every name each entry of @forge/adapters exports at runtime, written out: adding or removing an
 * export is an API decision, so a change to these lists must be a deliberate one.
 */
const EXPORTS: Record<string, string[]> = {
  index: ['modelText', 'refusalText'],
  ai: ['aiTool', 'aiTools'],
  'openai-agents': ['openaiAgentsTool', 'openaiAgentsTools'],
  langchain: ['langchainTool', 'langchainTools'],
  mastra: ['mastraTool', 'mastraTools'],
};

// Imported while the file is collected (loading the frameworks can be slow on a busy machine).
// By URL, not a literal specifier: the test typechecks before this package's own build.
const entries = Object.fromEntries(
  await Promise.all(
    Object.keys(EXPORTS).map(async (name) => {
      const entry = (await import(new URL(`../dist/${name}.js`, import.meta.url).href).catch((err: Error) => {
        throw new Error(`${err.message}: build first (pnpm turbo run build --filter=@forge/adapters)`);
      })) as Record<string, unknown>;
      return [name, entry] as const;
    }),
  ),
);

it('each built entry exports exactly the listed names', () => {
  for (const [name, want] of Object.entries(EXPORTS))
    expect(Object.keys(entries[name] ?? {}).sort(), `the exports of @forge/adapters/${name} changed: update test/exports.test.ts`).toEqual(
      want,
    );
});
