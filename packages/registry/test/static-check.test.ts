import { describe, expect, it } from 'vitest';
import { runtimeFamily, STATIC_RULES, staticCheck } from '../src/index.js';

const rules = (impl: string, runtime: string, network = false) => staticCheck({ impl, runtime }, { network }).map((f) => [f.rule, f.line]);

describe('staticCheck', () => {
  it('python: shelling out, ctypes, sockets and HTTP without network, rmtree of /', () => {
    const impl = [
      'import json, sys',
      'import subprocess',
      'from subprocess import run',
      'os.system("ls")',
      'os.popen("ls")',
      'x = subprocess.check_output(["ls"])',
      'import ctypes',
      'import socket',
      'from socket import create_connection',
      'import requests',
      'from urllib.request import urlopen',
      'shutil.rmtree("/")',
      '# import socket  (a comment)',
      '    # os.system("x")',
    ].join('\n');
    expect(rules(impl, 'python3')).toEqual([
      ['py.subprocess', 2],
      ['py.subprocess', 3],
      ['py.os_system', 4],
      ['py.os_system', 5],
      ['py.subprocess', 6],
      ['py.ctypes', 7],
      ['py.socket', 8],
      ['py.socket', 9],
      ['py.http_client', 10],
      ['py.http_client', 11],
      ['py.rmtree_root', 12],
    ]);
    // With a network grant, sockets and HTTP clients are fine.
    expect(rules(impl, 'python3.11', true).map(([r]) => r)).not.toContain('py.socket');
    expect(rules(impl, 'python3.11', true).map(([r]) => r)).not.toContain('py.http_client');
  });

  it('python: no finding for clean code or look-alikes', () => {
    const clean = [
      'import json, sys, os.path, socketserver_helpers',
      'from urllib.parse import quote',
      'data = json.load(sys.stdin)',
      'mysubprocess = 1',
      'my_os.system_name = "linux"',
      'shutil.rmtree(tmpdir)',
      'print(json.dumps({"ok": True, "data": os.path.basename(data["path"])}))',
    ].join('\n');
    expect(staticCheck({ impl: clean, runtime: 'python3' })).toEqual([]);
  });

  it('node: child_process, vm, process.binding, network modules and fetch without network', () => {
    const impl = [
      "const cp = require('child_process');",
      "import { exec } from 'node:child_process';",
      "const vm = await import('vm');",
      "process.binding('fs');",
      "import net from 'node:net';",
      "const https = require('https');",
      "const r = await fetch('https://example.com');",
      "// require('child_process')",
      " * import net from 'net'",
    ].join('\n');
    expect(rules(impl, 'node')).toEqual([
      ['node.child_process', 1],
      ['node.child_process', 2],
      ['node.vm', 3],
      ['node.process_binding', 4],
      ['node.net', 5],
      ['node.net', 6],
      ['node.fetch', 7],
    ]);
    expect(rules(impl, 'node', true)).toEqual([
      ['node.child_process', 1],
      ['node.child_process', 2],
      ['node.vm', 3],
      ['node.process_binding', 4],
    ]);
    const clean =
      "const fs = require('node:fs');\nconst input = JSON.parse(fs.readFileSync(0, 'utf8'));\nconst netTotal = input.a;\nconsole.log(JSON.stringify({ ok: true, data: netTotal }));";
    expect(staticCheck({ impl: clean, runtime: 'node' })).toEqual([]);
  });

  it('shell: network tools without network, /dev/tcp, rm -rf /', () => {
    const impl = [
      '#!/bin/bash',
      'set -eu',
      'curl -s https://example.com',
      'data=$(wget -qO- http://x)',
      'echo hi | nc host 80',
      'exec 3<>/dev/tcp/example.com/80',
      'rm -rf /',
      'rm -r -f /*',
      'rm --recursive ~',
      'rm -rf --no-preserve-root /',
      '# curl in a comment',
    ].join('\n');
    expect(rules(impl, 'bash')).toEqual([
      ['sh.network_tool', 3],
      ['sh.network_tool', 4],
      ['sh.network_tool', 5],
      ['sh.dev_tcp', 6],
      ['sh.rm_rf_root', 7],
      ['sh.rm_rf_root', 8],
      ['sh.rm_rf_root', 9],
      ['sh.rm_rf_root', 10],
      ['sh.no_preserve_root', 10],
    ]);
    expect(rules(impl, 'sh', true).map(([r]) => r)).toEqual([
      'sh.rm_rf_root',
      'sh.rm_rf_root',
      'sh.rm_rf_root',
      'sh.rm_rf_root',
      'sh.no_preserve_root',
    ]);
    const clean = 'set -eu\nin=$(cat)\nrm -rf "$TMPDIR/work"\nrm -f /tmp/x\necho "{\\"ok\\": true, \\"data\\": \\"sync done\\"}"';
    expect(staticCheck({ impl: clean, runtime: 'sh' })).toEqual([]);
  });

  it('reports the rule message and nothing for an unknown runtime', () => {
    expect(staticCheck({ impl: 'import subprocess', runtime: 'python3' })).toEqual([
      { rule: 'py.subprocess', line: 1, message: 'subprocess starts other programs; do the work in Python instead' },
    ]);
    expect(staticCheck({ impl: 'import subprocess', runtime: 'ruby' })).toEqual([]);
    expect(runtimeFamily('python3.12')).toBe('python');
    expect(runtimeFamily('node')).toBe('node');
    expect(runtimeFamily('dash')).toBe('shell');
  });

  it('has unique, stable rule ids', () => {
    const ids = STATIC_RULES.map((r) => r.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toMatchInlineSnapshot(`
      [
        "py.os_system",
        "py.subprocess",
        "py.ctypes",
        "py.socket",
        "py.http_client",
        "py.rmtree_root",
        "node.child_process",
        "node.vm",
        "node.process_binding",
        "node.net",
        "node.fetch",
        "sh.network_tool",
        "sh.dev_tcp",
        "sh.rm_rf_root",
        "sh.no_preserve_root",
      ]
    `);
  });
});
