import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { type CallToolResult, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { clip, ms, type Output, type Style, unstyled } from './output.js';

/** One numbered step of the tour, as `--json` reports it. */
export interface DemoStep {
  n: number;
  title: string;
  /** What the step shows about forge. */
  proves: string;
  ok: boolean;
  ms: number;
  lines: string[];
}

/** A step's outcome was not what the tour expects: forge (or the host) is not working as documented. */
export class Unexpected extends Error {}

/** Throws {@link Unexpected} with `what` unless `cond` holds. */
export function expect(cond: unknown, what: string): void {
  if (!cond) throw new Unexpected(what);
}

/** A forge tool call's answer, as the tour reads it. */
export interface Envelope {
  ok: boolean;
  data?: unknown;
  error?: { kind: string; message: string };
  meta?: { cache?: string; duration_ms?: number; run_id?: string };
}

/** Prints one line of the current step (and keeps it for --json). */
export type StepLine = (text: string) => void;

/** Environment variables of the caller that would change what the demo shows: the demo sets its own. */
const FORGE_VARS = ['FORGE_HOME', 'FORGE_PERSONA', 'FORGE_ALLOWED_TOOLS', 'FORGE_SESSION_ID', 'FORGE_TASK_ID', 'FORGE_SECRET_VAULT'];

/**
 * One run of the tour: its scratch home and project (made by the constructor, removed by
 * {@link close}), the `forge serve` child and the MCP client talking to it, and the steps so far.
 */
export class DemoTour {
  readonly steps: DemoStep[] = [];
  readonly root = mkdtempSync(join(tmpdir(), 'forge-demo-'));
  readonly home = join(this.root, 'home');
  readonly project = join(this.root, 'project');
  /** The environment of every forge the tour starts: the caller's, without its FORGE_* settings. */
  readonly env: Record<string, string> = {};
  /** What `forge serve` wrote on stderr, shown when the tour stops on an error. */
  serverLog = '';
  private transport: StdioClientTransport | undefined;
  private connected: Client | undefined;
  private changed: (() => void) | undefined;

  constructor(
    readonly cliPath: string,
    readonly out: Output,
    callerEnv: NodeJS.ProcessEnv,
  ) {
    mkdirSync(this.home, { mode: 0o700 });
    mkdirSync(join(this.project, '.forge'), { recursive: true, mode: 0o700 });
    for (const [k, v] of Object.entries(callerEnv)) if (v !== undefined && !FORGE_VARS.includes(k)) this.env[k] = v;
    this.env.FORGE_HOME = this.home;
    this.env.NO_COLOR = '1';
  }

  get style(): Style {
    return this.out.style;
  }

  /** A line for people (nothing under --json). */
  say(text = ''): void {
    if (!this.out.json) this.out.line(text);
  }

  /** Runs one step; its lines print as they come and are kept for --json. */
  async step(title: string, proves: string, body: (line: StepLine) => Promise<void>): Promise<void> {
    const s = this.style;
    const rec: DemoStep = { n: this.steps.length + 1, title, proves, ok: false, ms: 0, lines: [] };
    this.steps.push(rec);
    this.say();
    this.say(`${s.bold(`${rec.n}. ${title}`)}`);
    this.say(`   ${s.dim(proves)}`);
    const t = performance.now();
    try {
      await body((text) => {
        rec.lines.push(unstyled(text));
        this.say(`   ${text}`);
      });
      rec.ok = true;
    } finally {
      rec.ms = performance.now() - t;
    }
  }

  /** Starts `forge serve` in the scratch project and connects the MCP SDK client to it over stdio. */
  async connect(): Promise<Client> {
    this.transport = new StdioClientTransport({
      command: process.execPath,
      args: [this.cliPath, 'serve'],
      cwd: this.project,
      env: this.env,
      stderr: 'pipe',
    });
    this.transport.stderr?.on('data', (d: Buffer) => (this.serverLog += d.toString()));
    this.connected = new Client({ name: 'forge-demo', version: '1.0.0' });
    this.connected.setNotificationHandler(ToolListChangedNotificationSchema, async () => this.changed?.());
    await this.connected.connect(this.transport);
    return this.connected;
  }

  /** The connected client. */
  get client(): Client {
    if (!this.connected) throw new Unexpected('no client');
    return this.connected;
  }

  /** Closes the client (EOF on the server's stdin); the server's exit code, when it has one. */
  async disconnect(): Promise<number | null | undefined> {
    // The SDK transport keeps its child private; its exit code is what the tour shows.
    const child = (this.transport as unknown as { _process?: { exitCode: number | null } })._process;
    await this.client.close();
    this.connected = undefined;
    return child?.exitCode;
  }

  /** Calls a tool, timed; the envelope is parsed from the result's first text. */
  async call(name: string, args: Record<string, unknown>): Promise<{ env: Envelope; ms: number; result: CallToolResult }> {
    const client = this.client;
    const t = performance.now();
    const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
    const took = performance.now() - t;
    const first = result.content[0];
    const env = JSON.parse(first?.type === 'text' ? first.text : '{}') as Envelope;
    return { env, ms: took, result };
  }

  /**
   * Resolves true at the next notifications/tools/list_changed, false after `timeoutMs`. The
   * limit only bounds a failure: on a busy machine the forge before it may itself take seconds.
   */
  nextListChanged(timeoutMs = 30_000): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.changed = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
  }

  /** A refused call as the tour prints it. */
  refusedLine(what: string, e: Envelope, took: number): string {
    const s = this.style;
    return `${s.red('✗')} ${what} → ${s.red(e.error?.kind ?? '?')}: ${clip(e.error?.message ?? '', 150)} ${s.dim(`(${ms(took)})`)}`;
  }

  /** Closes the client, if still connected, and removes the scratch directories. */
  async close(): Promise<void> {
    await this.connected?.close().catch(() => {});
    rmSync(this.root, { recursive: true, force: true });
  }
}
