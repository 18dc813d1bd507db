import { expect, test } from 'vitest';
import { parseReadme } from './readmeBlocks.js';

const md = (...lines: string[]) => `${lines.join('\n')}\n`;

test('ts, js, mjs, sh and bash blocks are examples; json, python and bare blocks are not', () => {
  const { blocks, problems } = parseReadme(
    'R.md',
    md('# t', '```ts', 'a()', '```', '```json', '{}', '```', '```', 'out', '```', '```sh', 'echo hi', '```', '~~~python', 'x', '~~~'),
  );
  expect(problems).toEqual([]);
  expect(blocks.map((b) => [b.line, b.lang, b.code])).toEqual([
    [2, 'ts', 'a()\n'],
    [11, 'sh', 'echo hi\n'],
  ]);
});

test('a not-run marker exempts the next example and keeps its reason', () => {
  const { blocks, problems } = parseReadme('R.md', md('<!-- not-run: installs from npm -->', '', '```sh', 'npm i x', '```'));
  expect(problems).toEqual([]);
  expect(blocks).toEqual([{ readme: 'R.md', line: 3, lang: 'sh', code: 'npm i x\n', notRun: 'installs from npm' }]);
});

test('a not-run marker without a reason, or above no example, is a problem', () => {
  const { problems } = parseReadme(
    'R.md',
    md(
      '<!-- not-run: -->',
      '```ts',
      'x',
      '```',
      '<!-- not-run: why -->',
      'text between',
      '```ts',
      'y',
      '```',
      '<!-- not-run: json -->',
      '```json',
      '{}',
      '```',
    ),
  );
  expect(problems).toEqual([
    { readme: 'R.md', line: 1, message: 'a not-run marker needs a reason: <!-- not-run: why -->' },
    { readme: 'R.md', line: 5, message: 'this marker is not directly above a ts/js/sh code block' },
    { readme: 'R.md', line: 10, message: 'this marker is not directly above a ts/js/sh code block' },
  ]);
});

test('a run marker names the text after which the server gets one SIGTERM, or a database; other run markers are problems', () => {
  const { blocks, problems } = parseReadme(
    'R.md',
    md(
      '<!-- run: sigterm-after="listening on" -->',
      '```ts',
      'serve()',
      '```',
      '<!-- run: forever -->',
      '```ts',
      'z',
      '```',
      '<!-- run: postgres -->',
      '```sh',
      'forge status',
      '```',
    ),
  );
  expect(blocks[0]?.sigtermAfter).toBe('listening on');
  expect(blocks.map((b) => b.postgres === true)).toEqual([false, false, true]);
  expect(problems).toEqual([
    {
      readme: 'R.md',
      line: 5,
      message: 'unknown run marker: the forms are <!-- run: sigterm-after="text" --> and <!-- run: postgres -->',
    },
  ]);
});

test('a fence closes only on its own kind and length, so a nested fence stays inside', () => {
  const { blocks } = parseReadme('R.md', md('````sh', 'cat <<X', '```', 'X', '````'));
  expect(blocks.map((b) => b.code)).toEqual(['cat <<X\n```\nX\n']);
});
