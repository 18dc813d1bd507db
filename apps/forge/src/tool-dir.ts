import { randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  fchmodSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmdirSync,
  statSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { hostname } from 'node:os';
import { basename, dirname, join, sep } from 'node:path';
import { DirLock } from '@forge/audit-chain';
import type { ToolCard } from '@forge/runner';
import { EnvironmentError } from './args.js';
import { CONTROL_FILES, controlFiles, type Launcher, launcherMark, launcherScript } from './tool-files.js';
import type { CallRow } from './tool-log.js';

/**
 * A tool directory (`forge tools export DIR`): for each tool, the executable `DIR/<name>` and its
 * control directory `DIR/<name>.d/`, plus `.forge-tools.json`, the list of what the export made.
 *
 * Trust rules (docs/security.md): DIR and every directory above it belong to the user running
 * the export or to root and no one else may write them (a sticky directory such as /tmp counts as
 * safe), so no one else can swap a path under the export's writes; DIR is never inside forge's
 * own state; a name the export did not make is never overwritten or removed. Every file is
 * written to a temporary name (created exclusively, links never followed) and renamed over.
 */

/** The file that says a directory is a tool directory, and which names the export made. */
export const MANIFEST = '.forge-tools.json';
/** Held while an export writes (a `--watch` holds it for as long as it runs). */
export const LOCK = '.forge-tools.lock';

interface Manifest {
  forge_tool_dir: 1;
  home: string;
  project: string;
  persona: string;
  tools: string[];
}

/** What one export did. */
export interface ExportReport {
  dir: string;
  /** Tools whose files changed (new or rewritten). */
  written: string[];
  /** Tools no longer visible, whose files were removed. */
  removed: string[];
  /** Tools left out, and why. */
  skipped: { name: string; why: string }[];
  /** Tools whose files were already as they should be. */
  unchanged: number;
}

/**
 * Makes `dir` ready for an export (created when missing, its parent existing) and returns its
 * real path; refuses a directory the trust rules do not allow, naming what to change.
 */
export function prepareToolDir(dir: string, forbidden: readonly string[]): string {
  let parent: string;
  try {
    parent = realpathSync(dirname(dir));
  } catch {
    throw new EnvironmentError(`${dir}: its parent directory does not exist; create it first`);
  }
  const exists = existsSync(dir);
  const real = exists ? realpathSync(dir) : join(parent, basename(dir));
  // Nothing is created before every rule holds.
  for (const f of forbidden) {
    let state: string;
    try {
      state = realpathSync(f);
    } catch {
      continue;
    }
    if (real === state || real.startsWith(`${state}${sep}`))
      throw new EnvironmentError(
        `${real} is ${real === state ? '' : 'inside '}forge's own state (${state}): export the tools into a directory of their own`,
      );
  }
  checkTrusted(exists ? real : parent, real);
  if (!exists) mkdirSync(real, { mode: 0o755 });
  if (!statSync(real).isDirectory()) throw new EnvironmentError(`${dir} is not a directory; name a directory to export the tools into`);
  return real;
}

/** Refuses when `from` or a directory above it belongs to someone else or is writable by others (see the trust rules above). */
function checkTrusted(from: string, target: string): void {
  const uid = process.geteuid?.() ?? 0;
  for (let d = from; ; d = dirname(d)) {
    const st = statSync(d);
    const sticky = (st.mode & 0o1000) !== 0;
    const where = d === target ? d : `${d} (above ${target})`;
    if (st.uid !== uid && st.uid !== 0)
      throw new EnvironmentError(
        d === target
          ? `${d} belongs to uid ${st.uid}, not to you (uid ${uid}): run the export as its owner (sudo -u '#${st.uid}' forge tools export …), or export into a directory of your own`
          : `${where} belongs to uid ${st.uid}, who could replace the export's files by renaming it: export into a directory whose every parent is yours or root's`,
      );
    if ((st.mode & 0o022) !== 0 && !(sticky && d !== target))
      throw new EnvironmentError(
        `${where} is writable by ${st.mode & 0o002 ? 'everyone' : 'its group'} (mode ${(st.mode & 0o7777).toString(8)}), who could replace the export's files: chmod go-w ${d}, or export elsewhere`,
      );
    if (dirname(d) === d) break;
  }
}

/**
 * Takes the directory's lock, or refuses at once when a live process holds it; returns its
 * release. forge's one lock design (`DirLock` of @forge/audit-chain): a lock whose process has
 * gone (a crash, a kill) is taken over at once.
 */
export async function lockToolDir(dir: string): Promise<() => Promise<void>> {
  const lock = new DirLock(join(dir, LOCK), { timeoutMs: 0 });
  try {
    await lock.acquire();
  } catch (err) {
    if ((err as { code?: unknown }).code !== 'lock_timeout') throw err;
    const held = await lock.holder();
    throw new EnvironmentError(
      `${dir} is being exported by process ${held ? `${held.pid}${held.host === hostname() ? '' : ` on ${held.host}`}` : '(unknown)'} (forge tools export --watch?): stop it, or export into another directory`,
    );
  }
  return () => lock.release();
}

function readManifest(dir: string): Manifest | undefined {
  const path = join(dir, MANIFEST);
  try {
    if (!lstatSync(path).isFile()) return undefined;
    const m = JSON.parse(readFileSync(path, 'utf8')) as Manifest;
    return m.forge_tool_dir === 1 && Array.isArray(m.tools) && m.tools.every((t) => typeof t === 'string') ? m : undefined;
  } catch {
    return undefined;
  }
}

/** Writes `data` to `path` through a temporary file renamed over it, unless it already holds exactly that. */
function writeIfChanged(path: string, data: string, mode: number): boolean {
  try {
    const st = lstatSync(path);
    if (st.isFile() && (st.mode & 0o777) === mode && readFileSync(path, 'utf8') === data) return false;
  } catch {
    // absent
  }
  const tmp = join(dirname(path), `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
  const fd = openSync(tmp, 'wx', mode);
  try {
    fchmodSync(fd, mode);
    writeFileSync(fd, data);
  } finally {
    closeSync(fd);
  }
  try {
    renameSync(tmp, path);
  } catch (err) {
    unlinkSync(tmp);
    throw err;
  }
  return true;
}

/**
 * Removes what an export made for `name` (its executable, its control files), leaving anything
 * else there. Only what reads as an export's is removed: an executable that is not an export's
 * launcher of that very name (a manifest copied along with a directory, or edited, can list any
 * name) stays, and so does its control directory.
 */
function removeTool(dir: string, name: string): boolean {
  const rm = (p: string) => {
    try {
      unlinkSync(p);
    } catch {
      // already gone
    }
  };
  const exe = join(dir, name);
  if (present(exe) && !isLauncherOf(exe, name)) return false;
  // The mirror of writing, where the executable comes last: it goes last, so whoever sees it
  // gone (an operator's `ls`, a script waiting on it) finds the control files gone too.
  const control = join(dir, `${name}.d`);
  let isDir = false;
  try {
    isDir = lstatSync(control).isDirectory();
  } catch {
    // no control directory
  }
  if (isDir) {
    for (const f of CONTROL_FILES) rm(join(control, f));
    if (linkTarget(join(control, 'hooks')) !== undefined) rm(join(control, 'hooks'));
    try {
      rmdirSync(control);
    } catch {
      // it holds something the export did not make (the operator's): kept
    }
  }
  rm(exe);
  return true;
}

/** Whether `path` is a regular file holding an export's launcher of the tool `name`. */
function isLauncherOf(path: string, name: string): boolean {
  try {
    if (!lstatSync(path).isFile()) return false;
    return readFileSync(path, 'utf8').startsWith(`#!/bin/sh\n${launcherMark(name)}`);
  } catch {
    return false;
  }
}

/**
 * `<name>.d/hooks` as a link to the tool's own hooks directory (`<home>/hooks/tools/<name>`, with
 * its `pre.d/` and `post.d/`) while that exists, so the hooks that run are the ones `ls` shows
 * there; no link otherwise. A `hooks` there that is not a link is the operator's: left alone.
 */
function linkHooks(control: string, hooks: string): boolean {
  const at = join(control, 'hooks');
  const now = linkTarget(at);
  const want = existsSync(hooks) ? hooks : undefined;
  if (now === want || (now === undefined && present(at))) return false;
  if (now !== undefined) unlinkSync(at);
  if (want !== undefined) symlinkSync(want, at);
  return true;
}

function linkTarget(path: string): string | undefined {
  try {
    return lstatSync(path).isSymbolicLink() ? readlinkSync(path) : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `path` exists (a dangling link counts). */
function present(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Brings `dir` (prepared and locked) in line with `cards`: each tool's executable and control
 * files written when they differ, the tools the last export made and that are gone removed.
 */
export function exportCards(
  dir: string,
  cards: readonly ToolCard[],
  launcher: Launcher,
  persona: string,
  calls: { of(name: string): readonly CallRow[] },
): ExportReport {
  const before = readManifest(dir);
  const ours = new Set(before?.tools ?? []);
  const report: ExportReport = { dir, written: [], removed: [], skipped: [], unchanged: 0 };
  const names = new Set(cards.map((c) => c.name));
  const exported: string[] = [];
  for (const card of cards) {
    const name = card.name;
    // `x.d` would be the control directory of a tool `x`.
    if (name.endsWith('.d') && names.has(name.slice(0, -2))) {
      report.skipped.push({ name, why: `its executable would be the control directory of "${name.slice(0, -2)}"` });
      continue;
    }
    const exe = join(dir, name);
    const control = join(dir, `${name}.d`);
    if (!ours.has(name) && (present(exe) || present(control))) {
      report.skipped.push({
        name,
        why: `${present(exe) ? exe : control} exists and was not made by an export: move it away, or export elsewhere`,
      });
      continue;
    }
    let changed = false;
    try {
      if (present(control) && !lstatSync(control).isDirectory()) unlinkSync(control);
      if (!present(control)) {
        mkdirSync(control, { mode: 0o755 });
        changed = true;
      }
      const files = controlFiles(card, calls.of(name));
      for (const f of CONTROL_FILES) {
        const p = join(control, f);
        if (files[f] === undefined) {
          if (present(p)) {
            unlinkSync(p);
            changed = true;
          }
        } else if (writeIfChanged(p, files[f], 0o644)) changed = true;
      }
      if (linkHooks(control, join(launcher.home, 'hooks', 'tools', name))) changed = true;
      // The executable last: once it is there, so are its control files.
      if (writeIfChanged(exe, launcherScript(name, launcher), 0o755)) changed = true;
    } catch (err) {
      report.skipped.push({ name, why: (err as Error).message });
      continue;
    }
    exported.push(name);
    if (changed) report.written.push(name);
    else report.unchanged++;
  }
  for (const name of ours) {
    if (exported.includes(name)) continue;
    // A tool skipped this time because of a problem keeps what an earlier export made.
    if (report.skipped.some((s) => s.name === name) && names.has(name)) {
      exported.push(name);
      continue;
    }
    if (removeTool(dir, name)) report.removed.push(name);
    else
      report.skipped.push({
        name,
        why: `${join(dir, name)} is not an export's launcher of ${name}: left as it is, and no longer listed as the export's`,
      });
  }
  const manifest: Manifest = { forge_tool_dir: 1, home: launcher.home, project: launcher.project, persona, tools: exported.sort() };
  writeIfChanged(join(dir, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`, 0o644);
  return report;
}
