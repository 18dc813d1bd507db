import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import type { Check } from './doctor-check.js';

/** How long one file system may take to say what it is before it counts as hung. */
export const FS_ANSWER_MS = 500;

/**
 * File system types (as `stat -f -c %T` names them) whose files live on another machine: every
 * stat, fsync and lock there waits on a server, and a server that stops answering stops them.
 */
const NETWORK = /^(nfs|nfs4|cifs|smb2|smb3|smbfs|afs|9p|v9fs|ceph|glusterfs|lustre|gpfs|beegfs|fuse\.(sshfs|s3fs|rclone|glusterfs))$/;

/** What `stat -f` said of `path`: its type, or that it did not answer in time, or why it failed. */
export type FsAnswer = { type: string } | { timedOut: true } | { error: string };

/**
 * The file system type of `path`, asked of a child process (`stat -f`) so that a hung network
 * mount never hangs forge: `ms` after the child started, it is left to the kernel (killed,
 * unreferenced) and the answer is `timedOut`.
 */
export function fsType(path: string, ms = FS_ANSWER_MS): Promise<FsAnswer> {
  return new Promise((resolve) => {
    let out = '';
    let err = '';
    const child = spawn('stat', ['-f', '-c', '%T', '--', path], { stdio: ['ignore', 'pipe', 'pipe'] });
    let timer: NodeJS.Timeout | undefined;
    // Counted from when the child runs, not from when it was asked for: on a busy machine starting
    // a process can take a while, and that is no sign of a hung mount.
    child.once('spawn', () => {
      timer = setTimeout(() => {
        // A process stuck in the kernel on a dead server may outlive SIGKILL for a while: let it.
        child.kill('SIGKILL');
        child.stdout.destroy();
        child.stderr.destroy();
        child.unref();
        resolve({ timedOut: true });
      }, ms);
    });
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', (e) => {
      clearTimeout(timer);
      resolve({ error: e.message });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve(code === 0 ? { type: out.trim() } : { error: err.trim() || `stat exited ${code}` });
    });
  });
}

/** Whether a file system type is one whose files live on another machine. */
export function isNetworkFs(type: string): boolean {
  return NETWORK.test(type);
}

/**
 * Where forge keeps what it writes on every call (the temporary directory sandboxes are staged
 * in, the home with the audit log, the project), each checked to be a local file system that
 * answers: a network one is a warning with its fix, one that does not answer within
 * {@link FS_ANSWER_MS} is a problem (every call would wait there).
 */
export async function fileSystemChecks(o: { home: string; project: string }): Promise<Check[]> {
  const places = [
    {
      what: 'temporary directory',
      path: tmpdir(),
      fix: 'point TMPDIR at a local disk (export TMPDIR=/var/tmp): sandboxes are staged there on every call',
    },
    {
      what: 'home',
      path: o.home,
      fix: 'keep FORGE_HOME on a local disk: the audit log is fsynced and locked there on every call',
    },
    {
      what: 'project',
      path: o.project,
      fix: 'keep the project on a local disk, or its .forge/ (tools, runs, locks) goes over the network on every call',
    },
  ];
  const answers = await Promise.all(places.map((p) => fsType(p.path)));
  const checks: Check[] = [];
  const local: string[] = [];
  places.forEach((p, i) => {
    const a = answers[i] as FsAnswer;
    if ('timedOut' in a)
      checks.push({
        name: 'file system',
        ok: false,
        detail: `the ${p.what} ${p.path} did not say what file system it is on within ${FS_ANSWER_MS} ms: a network mount whose server does not answer?`,
        fix: `check the mount (findmnt -T ${p.path}); ${p.fix}`,
      });
    else if ('error' in a)
      checks.push({
        name: 'file system',
        ok: true,
        warn: true,
        detail: `what file system the ${p.what} ${p.path} is on could not be told: ${a.error}`,
        fix: `check that ${p.path} exists and this user can read it (stat -f ${p.path})`,
      });
    else if (isNetworkFs(a.type))
      checks.push({
        name: 'file system',
        ok: true,
        warn: true,
        detail: `the ${p.what} ${p.path} is on ${a.type}, a network file system: calls wait on its server (and a stuck server stops them)`,
        fix: p.fix,
      });
    else local.push(`${p.what} ${a.type}`);
  });
  if (local.length > 0)
    checks.unshift({ name: 'file systems', ok: true, detail: `local: ${local.join(', ')} (each answered within ${FS_ANSWER_MS} ms)` });
  return checks;
}
