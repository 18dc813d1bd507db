import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { addGatewayServers, createGatewayConfig, importMcpConfig } from '../src/index.js';

const SECRETS = [
  `ghp_${'Zq9'.repeat(12)}`,
  'sk-ant-api03-very-secret-value-0123456789',
  'postgres://admin:hunter2@db.internal:5432/app',
  'plain-looking-value',
  'Bearer tok_abcdef0123456789',
  'x-api-key-value-42',
];

const claudeDesktop = JSON.stringify(
  {
    mcpServers: {
      github: { command: 'npx', args: ['-y', '@modelcontextprotocol/server-github'], env: { GITHUB_PERSONAL_ACCESS_TOKEN: SECRETS[0] } },
      anthropic: {
        command: 'node',
        args: ['/opt/srv/index.js'],
        env: { ANTHROPIC_API_KEY: SECRETS[1], DATABASE_URL: SECRETS[2], LOG_LEVEL: SECRETS[3] },
      },
      'my.remote server': {
        type: 'http',
        url: 'https://mcp.example.com/mcp',
        headers: { Authorization: SECRETS[4], 'X-Api-Key': SECRETS[5] },
      },
      legacy: { type: 'sse', url: 'https://old.example.com/sse' },
      leaky: { command: 'srv', args: ['--token', 'abcdef123'] },
      split: { command: 'npx -y pkg' },
      off: { command: 'x', disabled: true },
    },
  },
  null,
  2,
);

describe('importMcpConfig', () => {
  it('converts servers, references every env and header value by vault name, and keeps no value', () => {
    const r = importMcpConfig(claudeDesktop, '/home/u/.config/Claude/claude_desktop_config.json');
    if (!r.ok) throw new Error(r.message);
    const out = JSON.stringify(r);
    for (const secret of [...SECRETS, 'abcdef123', 'hunter2']) expect(out).not.toContain(secret);
    expect(r.servers.github).toEqual({
      command: 'npx',
      args: ['-y', '@modelcontextprotocol/server-github'],
      secrets: { GITHUB_PERSONAL_ACCESS_TOKEN: 'github_github_personal_access_token' },
    });
    expect(r.servers.anthropic?.secrets).toEqual({
      ANTHROPIC_API_KEY: 'anthropic_anthropic_api_key',
      DATABASE_URL: 'anthropic_database_url',
      LOG_LEVEL: 'anthropic_log_level',
    });
    expect(r.servers.my_remote_server).toEqual({
      url: 'https://mcp.example.com/mcp',
      secrets: { Authorization: 'my_remote_server_authorization' },
    });
    expect(r.servers.split).toEqual({ command: 'npx', args: ['-y', 'pkg'] });
    expect(r.servers.off).toEqual({ command: 'x', enabled: false });
    expect(r.vault.map((v) => v.vault)).toEqual([
      'github_github_personal_access_token',
      'anthropic_anthropic_api_key',
      'anthropic_database_url',
      'anthropic_log_level',
      'my_remote_server_authorization',
    ]);
    expect(r.vault.find((v) => v.header)?.hint).toContain('without "Bearer "');
    expect(r.skipped.map((s) => s.server)).toEqual(['legacy', 'leaky']);
    expect(r.skipped[1]?.reason).toContain('credential');
    expect(r.notes.join('\n')).toContain('header "X-Api-Key" was dropped');
    expect(r.notes.join('\n')).toContain('server "my.remote server" is named "my_remote_server"');
  });

  it('refuses what is not an MCP client config, with the file and position', () => {
    expect(importMcpConfig('{"a": 1}', 'x.json')).toMatchObject({ ok: false, kind: 'validation_failed' });
    const bad = importMcpConfig('{\n  "mcpServers": {,}\n}', 'x.json');
    expect(!bad.ok && bad.message).toMatch(/^x\.json:2:18: not valid JSON/);
  });

  it('addGatewayServers writes a valid gateway.json atomically and refuses to overwrite an entry', () => {
    const root = mkdtempSync(join(tmpdir(), 'forge-gateway-import-'));
    onTestFinished(() => rmSync(root, { recursive: true, force: true }));
    const user = join(root, 'home', 'gateway.json');
    const project = join(root, 'project', '.forge', 'gateway.json');
    const r = importMcpConfig(claudeDesktop, 'c.json');
    if (!r.ok) throw new Error(r.message);
    const added = addGatewayServers({ file: user, level: 'user', servers: r.servers });
    expect(added).toEqual({ ok: true, file: user, added: Object.keys(r.servers) });
    expect(statSync(user).mode & 0o777).toBe(0o600);
    for (const secret of SECRETS) expect(readFileSync(user, 'utf8')).not.toContain(secret);
    const cfg = createGatewayConfig({ userFile: user }).current();
    expect(cfg.ok && [...cfg.config.servers.keys()]).toEqual(['anthropic', 'github', 'my_remote_server', 'split']);

    const before = readFileSync(user, 'utf8');
    const again = addGatewayServers({ file: user, level: 'user', servers: { GitHub: { command: 'other' } } });
    expect(again).toMatchObject({ ok: false, kind: 'server_exists' });
    expect(!again.ok && again.message).toContain(`server "GitHub" is already declared in ${user}`);
    expect(readFileSync(user, 'utf8')).toBe(before);

    expect(addGatewayServers({ file: project, level: 'project', servers: { github: { command: 'x' } }, otherFile: user })).toMatchObject({
      ok: false,
      kind: 'server_exists',
    });
    expect(addGatewayServers({ file: project, level: 'project', servers: { p: { command: 'x', unsandboxed: true } } })).toMatchObject({
      ok: false,
      kind: 'validation_failed',
    });
    mkdirSync(join(root, 'project', '.forge'), { recursive: true });
    writeFileSync(project, '{"servers": {');
    expect(addGatewayServers({ file: project, level: 'project', servers: { q: { command: 'x' } } })).toMatchObject({
      ok: false,
      kind: 'validation_failed',
    });
  });
});
