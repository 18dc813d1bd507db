import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createGatewayConfig, type GatewayConfigEvent, parseGatewayDocument } from '../src/index.js';

function scratch() {
  const root = mkdtempSync(join(tmpdir(), 'forge-gateway-config-'));
  onTestFinished(() => rmSync(root, { recursive: true, force: true }));
  const user = join(root, 'gateway.json');
  const project = join(root, 'project-gateway.json');
  return { root, user, project };
}

/** Writes a file whole under a new inode (the way editors save), so a reread always sees a new identity. */
function put(file: string, value: unknown) {
  const tmp = `${file}.tmp`;
  writeFileSync(tmp, typeof value === 'string' ? value : JSON.stringify(value, null, 2));
  renameSync(tmp, file);
}

const refuse = (doc: unknown, level: 'user' | 'project' = 'user') => {
  const text = typeof doc === 'string' ? doc : JSON.stringify(doc, null, 2);
  const r = parseGatewayDocument(text, '/x/gateway.json', level);
  if (r.ok) throw new Error('expected a refusal');
  return r.problem;
};

describe('gateway.json: merge', () => {
  it('project servers add to user servers, defaults filled', () => {
    const s = scratch();
    put(s.user, { servers: { fs: { command: 'npx', args: ['-y', 'x'], secrets: { GITHUB_TOKEN: 'github_token' } } } });
    put(s.project, {
      servers: {
        web: { url: 'https://mcp.example.com/mcp', secrets: { Authorization: 'web_token' } },
        off: { command: 'x', enabled: false },
      },
    });
    const c = createGatewayConfig({ userFile: s.user, workspaceFile: s.project }).current();
    if (!c.ok) throw new Error(c.message);
    expect([...c.config.servers.keys()]).toEqual(['fs', 'web']);
    expect(c.config.servers.get('fs')).toEqual({
      name: 'fs',
      transport: 'stdio',
      command: 'npx',
      args: ['-y', 'x'],
      env: {},
      secrets: { GITHUB_TOKEN: 'github_token' },
      binds: [],
      network: false,
      unsandboxed: false,
      limits: {},
      from: 'user',
      file: s.user,
    });
    expect(c.config.servers.get('web')).toMatchObject({
      transport: 'http',
      url: 'https://mcp.example.com/mcp',
      from: 'project',
      file: s.project,
      args: [],
    });
    expect(c.config.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('missing files mean no servers', () => {
    const s = scratch();
    const c = createGatewayConfig({ userFile: s.user, workspaceFile: s.project }).current();
    expect(c.ok && c.config.servers.size).toBe(0);
  });

  it('a project entry with the name of a user entry is refused naming both files', () => {
    const s = scratch();
    put(s.user, { servers: { github: { command: 'gh-mcp' } } });
    put(s.project, { servers: { GitHub: { command: '/tmp/evil' } } });
    const c = createGatewayConfig({ userFile: s.user, workspaceFile: s.project }).current();
    expect(c.ok).toBe(false);
    if (c.ok) return;
    expect(c.kind).toBe('validation_failed');
    expect(c.message).toContain(`${s.project}:3:15`);
    expect(c.message).toContain(`already declared in ${s.user} (as "github")`);
  });

  it('network, binds and limits come through; bind mode defaults to ro', () => {
    const s = scratch();
    put(s.user, {
      servers: {
        a: {
          command: 'a',
          binds: [{ path: '/srv/data' }, { path: '/srv/out', mode: 'rw' }],
          network: { allow_domains: ['api.github.com'] },
          limits: { memory_mb: 256 },
          tools: ['x'],
          timeout_ms: 5000,
        },
      },
    });
    const c = createGatewayConfig({ userFile: s.user }).current();
    if (!c.ok) throw new Error(c.message);
    expect(c.config.servers.get('a')).toMatchObject({
      binds: [
        { path: '/srv/data', mode: 'ro' },
        { path: '/srv/out', mode: 'rw' },
      ],
      network: { allow_domains: ['api.github.com'], deny_domains: [], allow_ports: [], private_networks: false },
      limits: { memory_mb: 256 },
      tools: ['x'],
      timeout_ms: 5000,
    });
  });
});

describe('gateway.json: refusals', () => {
  it('a credential-named env variable: move it to the vault', () => {
    const p = refuse({ servers: { github: { command: 'gh', env: { GITHUB_TOKEN: 'abc' } } } });
    expect(p).toMatchObject({ server: 'github', field: 'env.GITHUB_TOKEN', line: 6, column: 25 });
    expect(p.message).toContain('move it to the vault and name it under "secrets"');
    expect(p.message).toContain('/x/gateway.json:6:25: servers.github.env.GITHUB_TOKEN');
  });

  it('an env value with a token form, under an innocent name, is refused and not echoed', () => {
    const token = `ghp_${'A1b2C3d4'.repeat(5)}`;
    const p = refuse({ servers: { g: { command: 'gh', env: { GH: token } } } });
    expect(p.field).toBe('env.GH');
    expect(p.reason).toContain('access token');
    expect(p.message).not.toContain(token);
    for (const v of ['sk-ant-api03-abcdefghijkl', 'xoxb-1234-5678', `AKIA${'X'.repeat(16)}`, 'Bearer abcdefghijkl'])
      expect(refuse({ servers: { g: { command: 'gh', env: { V: v } } } }).field).toBe('env.V');
  });

  it('a token as an argument, or after a credential flag, is refused', () => {
    expect(refuse({ servers: { g: { command: 'gh', args: ['--token', 'abc123'] } } }).field).toBe('args.1');
    expect(refuse({ servers: { g: { command: 'gh', args: ['--api-key=abc'] } } }).field).toBe('args.0');
    const ok = parseGatewayDocument(
      JSON.stringify({ servers: { g: { command: 'gh', args: ['--tls-key', '/etc/k.pem', '-y'] } } }),
      'f',
      'user',
    );
    expect(ok.ok).toBe(true);
  });

  it('a secret value where a vault name belongs is refused', () => {
    const p = refuse({ servers: { g: { command: 'gh', secrets: { GITHUB_TOKEN: `ghp_${'a1'.repeat(18)}` } } } });
    expect(p.field).toBe('secrets.GITHUB_TOKEN');
    expect(p.reason).toContain('vault name');
  });

  it('a url with credentials in it is refused', () => {
    expect(refuse({ servers: { w: { url: 'https://u:p@x.example.com/mcp' } } }).field).toBe('url');
    expect(refuse({ servers: { w: { url: 'https://x.example.com/mcp?api_key=1' } } }).field).toBe('url');
    expect(refuse({ servers: { w: { url: 'http://x.example.com/mcp' } } }).reason).toContain('use https');
  });

  it('unsandboxed is refused at project level, accepted at user level', () => {
    const doc = { servers: { local: { command: 'x', unsandboxed: true } } };
    const p = refuse(doc, 'project');
    expect(p).toMatchObject({ server: 'local', field: 'unsandboxed' });
    expect(p.reason).toContain("only the operator's $FORGE_HOME/gateway.json");
    expect(parseGatewayDocument(JSON.stringify(doc), 'f', 'user').ok).toBe(true);
  });

  it('both command and url, or neither, is refused', () => {
    expect(refuse({ servers: { a: { command: 'x', url: 'https://x.example.com' } } })).toMatchObject({ field: 'url' });
    expect(refuse({ servers: { a: { command: 'x', url: 'https://x.example.com' } } }).reason).toContain('has both "command" and "url"');
    expect(refuse({ servers: { a: {} } }).reason).toContain('needs "command"');
  });

  it('a bad server name is refused with the grammar', () => {
    const p = refuse({ servers: { 'git.hub': { command: 'x' } } });
    expect(p.reason).toBe(
      'servers has a key "git.hub" that is not a server name: a letter, then letters, digits, _ or - (at most 32; no dots: it is the <server> part of <server>.<tool>)',
    );
    expect(refuse({ servers: { ['a'.repeat(33)]: { command: 'x' } } }).reason).toContain('not a server name');
    expect(refuse({ servers: { '1x': { command: 'x' } } }).reason).toContain('not a server name');
  });

  it('duplicate keys are refused with line and column', () => {
    const text = '{\n  "servers": {\n    "a": { "command": "x" },\n    "a": { "command": "y" }\n  }\n}\n';
    const p = refuse(text);
    expect(p.message).toBe('/x/gateway.json:4:5: not valid JSON: duplicate key "a"');
  });

  it('a shell line as command is refused with the argv form', () => {
    const p = refuse({ servers: { a: { command: 'npx -y @scope/server' } } });
    expect(p.field).toBe('command');
    expect(p.reason).toContain('write "command": "npx", "args": ["-y","@scope/server"]');
    expect(refuse({ servers: { a: { command: 'sh -c "x | y"' } } }).reason).toContain('put the program in "command"');
  });

  it('Authorization only for url servers; env names only for stdio servers; stdio-only fields on a url server', () => {
    expect(refuse({ servers: { a: { command: 'x', secrets: { Authorization: 'tok' } } } }).field).toBe('secrets.Authorization');
    expect(refuse({ servers: { a: { url: 'https://x.example.com', secrets: { TOKEN: 'tok' } } } }).field).toBe('secrets.TOKEN');
    expect(refuse({ servers: { a: { url: 'https://x.example.com', binds: [] } } }).field).toBe('binds');
  });

  it('env names must be valid; unknown keys get a suggestion; network shape', () => {
    expect(refuse({ servers: { a: { command: 'x', env: { 'BAD-NAME': '1' } } } }).reason).toContain('not an environment variable name');
    expect(refuse({ servers: { a: { command: 'x', comand: 'y' } } }).reason).toBe(
      'unknown key "comand" in servers.a (did you mean "command"?)',
    );
    expect(refuse({ servers: { a: { command: 'x', network: true } } }).reason).toContain('must be false (no network) or {"allow_domains"');
    expect(refuse({ servers: { a: { command: 'x', network: { allow_domains: ['bad domain'] } } } }).reason).toContain(
      'a domain (example.com)',
    );
  });

  it('servers differing only by case are refused', () => {
    expect(refuse({ servers: { a: { command: 'x' }, A: { command: 'y' } } }).reason).toContain('differ only by case');
  });
});

describe('gateway.json: hot reload', () => {
  it('a good edit reloads with the new digest; a malformed one keeps the last good and reports once', () => {
    const s = scratch();
    const events: GatewayConfigEvent[] = [];
    put(s.user, { servers: { a: { command: 'a' } } });
    const cfg = createGatewayConfig({ userFile: s.user, workspaceFile: s.project, onEvent: (e) => events.push(e) });
    const first = cfg.current();
    if (!first.ok) throw new Error(first.message);
    expect(events).toEqual([{ type: 'gateway.reloaded', digest: first.config.digest, servers: ['a'], files: [s.user], initial: true }]);
    expect(cfg.current()).toBe(cfg.current());

    put(s.user, { servers: { a: { command: 'a' }, b: { command: 'b' } } });
    const second = cfg.current();
    if (!second.ok) throw new Error(second.message);
    expect([...second.config.servers.keys()]).toEqual(['a', 'b']);
    expect(second.config.digest).not.toBe(first.config.digest);
    expect(events.at(-1)).toEqual({
      type: 'gateway.reloaded',
      digest: second.config.digest,
      servers: ['a', 'b'],
      files: [s.user],
      initial: false,
    });

    put(s.user, '{"servers": {"a": {"command": "a"},}}');
    const kept = cfg.current();
    expect(kept.ok && [...kept.config.servers.keys()]).toEqual(['a', 'b']);
    expect(events.at(-1)).toMatchObject({ type: 'gateway.reload_failed', file: s.user, line: 1, column: 36, kept: 'last_good' });
    const n = events.length;
    cfg.current();
    expect(events.length).toBe(n);

    put(s.project, { servers: { a: { command: 'evil' } } });
    const still = cfg.current();
    expect(still.ok && still.config.digest).toBe(second.config.digest);
    expect(events.at(-1)).toMatchObject({ type: 'gateway.reload_failed', file: s.project, server: 'a', kept: 'last_good' });

    rmSync(s.project);
    put(s.user, { servers: { c: { command: 'c' } } });
    const third = cfg.current();
    expect(third.ok && [...third.config.servers.keys()]).toEqual(['c']);
    expect(events.at(-1)).toMatchObject({ type: 'gateway.reloaded', servers: ['c'] });
  });

  it('a file bad from the start leaves nothing in force, until it is fixed', () => {
    const s = scratch();
    const events: GatewayConfigEvent[] = [];
    put(s.project, { servers: { a: { command: 'a', unsandboxed: true } } });
    const cfg = createGatewayConfig({ userFile: s.user, workspaceFile: s.project, onEvent: (e) => events.push(e) });
    const r = cfg.current();
    expect(r).toMatchObject({ ok: false, kind: 'validation_failed' });
    expect(!r.ok && r.message).toContain('servers.a.unsandboxed');
    expect(events).toMatchObject([{ type: 'gateway.reload_failed', kept: 'nothing', field: 'unsandboxed' }]);
    put(s.project, { servers: { a: { command: 'a' } } });
    const fixed = cfg.current();
    expect(fixed.ok && fixed.config.servers.get('a')?.from).toBe('project');
  });
});
