import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/**
 * The code blocks of the repository's READMEs, and which of them run.
 *
 * Convention (README.md, packages/<name>/README.md, apps/<name>/README.md):
 * - A fenced block whose language is `ts`, `js`, `mjs`, `sh` or `bash` is an example, and it runs.
 *   Blocks in other languages (`json`, `python`, none: data, output, a tool's source) are not run.
 * - `<!-- not-run: <reason> -->` just above the fence (blank lines between are allowed) exempts
 *   one example. The reason is required, and a marker must be followed by an example block:
 *   either mistake is reported as a failure, so no example escapes by accident.
 * - `<!-- run: sigterm-after="<text>" -->` just above the fence marks a server: the test keeps its
 *   stdin open, waits for `<text>` on its stdout or stderr, sends one SIGTERM and expects it to
 *   exit 0 promptly, leaving nothing running.
 * - `<!-- run: postgres -->` runs the example with `FORGE_STORE` set to a database of its own on a
 *   throwaway PostgreSQL server (the one the tests start), as a reader runs it with theirs.
 */
export const RUNNABLE_LANGS = ['ts', 'js', 'mjs', 'sh', 'bash'] as const;
export type RunnableLang = (typeof RUNNABLE_LANGS)[number];

export interface ReadmeBlock {
  /** The README, relative to the repository root. */
  readme: string;
  /** 1-based line of the opening fence. */
  line: number;
  lang: RunnableLang;
  code: string;
  /** Set when the block carries `<!-- not-run: reason -->`. */
  notRun?: string;
  /** Set when the block carries `<!-- run: sigterm-after="text" -->`. */
  sigtermAfter?: string;
  /** Set when the block carries `<!-- run: postgres -->`. */
  postgres?: boolean;
}

/** A marker that cannot be honoured: a missing reason, or nothing runnable after it. */
export interface MarkerProblem {
  readme: string;
  line: number;
  message: string;
}

/** README.md at the root and in every directory under packages/ and apps/. */
export function findReadmes(root: string): string[] {
  const found = [join(root, 'README.md')];
  for (const group of ['packages', 'apps']) {
    const dir = join(root, group);
    if (!existsSync(dir)) continue;
    for (const name of readdirSync(dir).sort()) {
      const readme = join(dir, name, 'README.md');
      if (existsSync(readme)) found.push(readme);
    }
  }
  return found.filter((f) => existsSync(f)).map((f) => relative(root, f));
}

const NOT_RUN = /^<!--\s*not-run:(.*?)-->\s*$/;
const RUN = /^<!--\s*run:(.*?)-->\s*$/;
const SIGTERM_AFTER = /^\s*sigterm-after="([^"]+)"\s*$/;

/** Parses one README's text into its example blocks and any misused markers. */
export function parseReadme(readme: string, text: string): { blocks: ReadmeBlock[]; problems: MarkerProblem[] } {
  const lines = text.split('\n');
  const blocks: ReadmeBlock[] = [];
  const problems: MarkerProblem[] = [];
  let pending: { line: number; notRun?: string; sigtermAfter?: string; postgres?: boolean } | undefined;
  const orphan = () => {
    if (pending) problems.push({ readme, line: pending.line, message: 'this marker is not directly above a ts/js/sh code block' });
    pending = undefined;
  };
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i] ?? '';
    const trimmed = raw.trim();
    const fence = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)/.exec(raw);
    if (fence) {
      const indent = fence[1] ?? '';
      const mark = fence[2] ?? '```';
      const lang = (fence[3] ?? '').toLowerCase();
      const body: string[] = [];
      let j = i + 1;
      for (; j < lines.length; j++) {
        const l = lines[j] ?? '';
        const close = /^\s*(`{3,}|~{3,})\s*$/.exec(l)?.[1];
        if (close && close[0] === mark[0] && close.length >= mark.length) break;
        body.push(l.startsWith(indent) ? l.slice(indent.length) : l);
      }
      if ((RUNNABLE_LANGS as readonly string[]).includes(lang)) {
        blocks.push({
          readme,
          line: i + 1,
          lang: lang as RunnableLang,
          code: `${body.join('\n')}\n`,
          ...(pending?.notRun !== undefined ? { notRun: pending.notRun } : {}),
          ...(pending?.sigtermAfter !== undefined ? { sigtermAfter: pending.sigtermAfter } : {}),
          ...(pending?.postgres ? { postgres: true } : {}),
        });
        pending = undefined;
      } else {
        orphan();
      }
      i = j;
      continue;
    }
    if (trimmed === '') continue;
    const notRun = NOT_RUN.exec(trimmed);
    const run = RUN.exec(trimmed);
    if (notRun) {
      orphan();
      const reason = (notRun[1] ?? '').trim();
      if (reason === '') problems.push({ readme, line: i + 1, message: 'a not-run marker needs a reason: <!-- not-run: why -->' });
      pending = { line: i + 1, notRun: reason || '(no reason)' };
    } else if (run) {
      orphan();
      const sig = SIGTERM_AFTER.exec(run[1] ?? '');
      const postgres = (run[1] ?? '').trim() === 'postgres';
      if (!sig && !postgres)
        problems.push({
          readme,
          line: i + 1,
          message: 'unknown run marker: the forms are <!-- run: sigterm-after="text" --> and <!-- run: postgres -->',
        });
      pending = { line: i + 1, ...(sig?.[1] ? { sigtermAfter: sig[1] } : {}), ...(postgres ? { postgres: true } : {}) };
    } else {
      orphan();
    }
  }
  orphan();
  return { blocks, problems };
}

/** Every README's example blocks and marker problems, under `root`. */
export function collectReadmeBlocks(root: string): { blocks: ReadmeBlock[]; problems: MarkerProblem[] } {
  const blocks: ReadmeBlock[] = [];
  const problems: MarkerProblem[] = [];
  for (const readme of findReadmes(root)) {
    const parsed = parseReadme(readme, readFileSync(join(root, readme), 'utf8'));
    blocks.push(...parsed.blocks);
    problems.push(...parsed.problems);
  }
  return { blocks, problems };
}
