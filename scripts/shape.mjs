#!/usr/bin/env node
/**
 * The source tree's shape, as the style guide bounds it: no source file over 600 lines, no
 * function over 150, no import cycle inside a package. Prints every breach (path:line and the
 * figure) and exits 1 when there is one; `--json` prints the findings as JSON instead.
 *   node scripts/shape.mjs
 * The test tier runs it too (scripts/test/shape.test.ts).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

export const MAX_FILE_LINES = 600;
export const MAX_FUNCTION_LINES = 150;

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Every package's source directory: packages/* and apps/*, src/ only (tests may be longer). */
function sourceDirs() {
  const dirs = [];
  for (const group of ['packages', 'apps']) {
    for (const name of readdirSync(join(root, group))) {
      const src = join(root, group, name, 'src');
      try {
        if (statSync(src).isDirectory()) dirs.push(src);
      } catch {}
    }
  }
  return dirs;
}

function tsFiles(dir) {
  const out = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...tsFiles(p));
    else if (/\.(ts|tsx|mts)$/.test(entry.name) && !entry.name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

function functionName(node, sf) {
  if (node.name) return node.name.getText(sf);
  const parent = node.parent;
  if (parent && ts.isVariableDeclaration(parent)) return parent.name.getText(sf);
  if (parent && ts.isPropertyAssignment(parent)) return parent.name.getText(sf);
  return '(anonymous)';
}

/** Imports of `file` that resolve to files of the same package (relative specifiers only). */
function localImports(sf, file) {
  const out = [];
  const add = (spec) => {
    if (!spec.startsWith('.')) return;
    const base = resolve(dirname(file), spec);
    for (const c of [base.replace(/\.js$/, '.ts'), base.replace(/\.js$/, '.tsx'), `${base}.ts`, join(base, 'index.ts')]) {
      try {
        if (statSync(c).isFile()) return void out.push(c);
      } catch {}
    }
  };
  const visit = (node) => {
    if (
      (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      // A type-only import is erased: it cannot form a cycle at run time, but it still ties the
      // two modules' designs together, so it counts.
      add(node.moduleSpecifier.text);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const [a] = node.arguments;
      if (a && ts.isStringLiteral(a)) add(a.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

function cycles(graph) {
  // Tarjan's strongly connected components: every component of more than one module is a cycle.
  let index = 0;
  const stack = [];
  const meta = new Map();
  const found = [];
  const strong = (v) => {
    meta.set(v, { index, low: index, on: true });
    index++;
    stack.push(v);
    for (const w of graph.get(v) ?? []) {
      if (!meta.has(w)) {
        strong(w);
        meta.get(v).low = Math.min(meta.get(v).low, meta.get(w).low);
      } else if (meta.get(w).on) meta.get(v).low = Math.min(meta.get(v).low, meta.get(w).index);
    }
    if (meta.get(v).low === meta.get(v).index) {
      const comp = [];
      let w;
      do {
        w = stack.pop();
        meta.get(w).on = false;
        comp.push(w);
      } while (w !== v);
      if (comp.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(comp.sort());
    }
  };
  for (const v of graph.keys()) if (!meta.has(v)) strong(v);
  return found;
}

export function shapeFindings() {
  const findings = [];
  for (const dir of sourceDirs()) {
    const graph = new Map();
    for (const file of tsFiles(dir)) {
      const text = readFileSync(file, 'utf8');
      const rel = relative(root, file);
      const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
      if (lines > MAX_FILE_LINES) findings.push({ rule: 'file', path: rel, line: 1, lines, limit: MAX_FILE_LINES });
      const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
      const visit = (node) => {
        if (ts.isFunctionLike(node) && 'body' in node && node.body) {
          const start = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line;
          const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line;
          const n = end - start + 1;
          if (n > MAX_FUNCTION_LINES) {
            findings.push({
              rule: 'function',
              path: rel,
              line: start + 1,
              name: functionName(node, sf),
              lines: n,
              limit: MAX_FUNCTION_LINES,
            });
          }
        }
        ts.forEachChild(node, visit);
      };
      visit(sf);
      graph.set(file, localImports(sf, file));
    }
    for (const comp of cycles(graph))
      findings.push({ rule: 'cycle', path: relative(root, comp[0]), line: 1, modules: comp.map((f) => relative(root, f)) });
  }
  return findings;
}

export function describe(f) {
  if (f.rule === 'file') return `${f.path}: ${f.lines} lines (at most ${f.limit}): split it along its parts`;
  if (f.rule === 'function')
    return `${f.path}:${f.line}: function ${f.name} is ${f.lines} lines (at most ${f.limit}): give its steps names of their own`;
  return `${f.path}: import cycle: ${f.modules.join(' → ')}: move what both need into a module of its own`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const findings = shapeFindings();
  if (process.argv.includes('--json')) console.log(JSON.stringify(findings, null, 2));
  else for (const f of findings) console.log(describe(f));
  process.exit(findings.length > 0 ? 1 : 0);
}
