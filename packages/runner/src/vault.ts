import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';

/** Why the vault could not give a tool its secrets (the error kinds of the call pipeline). */
export type VaultFailure =
  | { ok: false; kind: 'secret_missing'; message: string; event?: 'secret.vault_missing' }
  | { ok: false; kind: 'vault_malformed'; message: string; event: 'secret.vault_malformed' };

export type VaultRead = { ok: true; values: Map<string, string> } | VaultFailure;

/**
 * Reads the requested secrets from the vault file, fresh on every call (an operator's edit
 * applies to the next call; nothing is cached in memory between calls).
 *
 * The vault is refused unless it is a regular file of mode 0600 owned by this user, holding a
 * JSON object of string values. It is opened once with O_NOFOLLOW and checked through that
 * descriptor, so a symlink or a swap between check and read cannot substitute another file.
 */
export function readSecrets(path: string, names: readonly string[]): VaultRead {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT')
      return {
        ok: false,
        kind: 'secret_missing',
        message: `the tool needs ${list(names)}, but there is no vault at ${path}; create it (mode 0600) with those keys`,
        event: 'secret.vault_missing',
      };
    return malformed(
      code === 'ELOOP'
        ? `the vault ${path} is a symlink; it must be a regular file (mode 0600)`
        : `the vault ${path} cannot be opened (${code}); it must be a regular file of mode 0600 owned by this user`,
    );
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return malformed(`the vault ${path} is not a regular file`);
    const mode = st.mode & 0o777;
    if (mode !== 0o600) return malformed(`the vault ${path} has mode ${mode.toString(8).padStart(4, '0')}; run: chmod 600 ${path}`);
    if (typeof process.getuid === 'function' && st.uid !== process.getuid())
      return malformed(`the vault ${path} is owned by uid ${st.uid}, not by this user (uid ${process.getuid()})`);
    let doc: unknown;
    try {
      doc = JSON.parse(readFileSync(fd, 'utf8'));
    } catch (err) {
      // The parser's message can quote the file's text, that is secret values: never pass it on.
      return malformed(`the vault ${path} is not valid JSON${err instanceof SyntaxError ? '' : ` (${String(err)})`}`);
    }
    if (doc === null || typeof doc !== 'object' || Array.isArray(doc))
      return malformed(`the vault ${path} must hold a JSON object of "NAME": "value" strings`);
    const bad = Object.entries(doc).find(([, v]) => typeof v !== 'string');
    if (bad) return malformed(`the vault ${path}: the value of "${bad[0]}" must be a string`);
    const values = new Map<string, string>();
    const missing: string[] = [];
    for (const n of names) {
      const v = (doc as Record<string, string>)[n];
      if (v === undefined || !Object.hasOwn(doc, n)) missing.push(n);
      else values.set(n, v);
    }
    if (missing.length > 0)
      return {
        ok: false,
        kind: 'secret_missing',
        message: `the vault ${path} has no ${list(missing)}; an operator adds ${missing.length > 1 ? 'them' : 'it'}`,
      };
    return { ok: true, values };
  } finally {
    closeSync(fd);
  }
}

function list(names: readonly string[]): string {
  return names.length === 1 ? `secret "${names[0]}"` : `secrets ${names.map((n) => `"${n}"`).join(', ')}`;
}

function malformed(message: string): VaultFailure {
  return { ok: false, kind: 'vault_malformed', message, event: 'secret.vault_malformed' };
}
