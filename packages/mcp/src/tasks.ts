/**
 * The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) on the 2026-07-28 era: a call
 * of a tool whose spec says `meta.task_support: "optional"` or `"required"`, from a client that
 * declared the extension, is answered at once with a `CreateTaskResult`; the call runs on, and
 * `tasks/get` answers its status and, once it ended, the tool result inline; `tasks/cancel`
 * kills its sandbox. A task belongs to the credential that created it (another caller's id is
 * unknown, as for an id never issued), lives `ttlMs` after it ended, and counts against a cap
 * per caller.
 */
import { randomBytes } from 'node:crypto';
import { type CallToolResult, CLIENT_CAPABILITIES_META_KEY } from '@modelcontextprotocol/server';

export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
/** How long a task stays readable once it ended. */
export const TASK_TTL_MS = 60 * 60 * 1000;
/** How often a client should poll `tasks/get`. */
export const TASK_POLL_MS = 500;
/** Most tasks one caller may hold (running or ended, within their TTL). */
export const MAX_TASKS_PER_CALLER = 256;
/** Most of them running at once: each holds a sandbox after its request ended. */
export const MAX_RUNNING_TASKS_PER_CALLER = 16;

export type TaskStatus = 'working' | 'completed' | 'failed' | 'cancelled';

interface TaskRecord {
  taskId: string;
  owner: string;
  status: TaskStatus;
  statusMessage?: string;
  createdAt: string;
  lastUpdatedAt: string;
  /** When it ended (ms since the epoch); it is dropped TASK_TTL_MS later. */
  endedAt?: number;
  result?: CallToolResult;
  error?: { code: number; message: string; data?: unknown };
  abort: AbortController;
}

/** The task fields every answer carries (`CreateTaskResult` and `tasks/get`). */
export interface TaskView {
  taskId: string;
  status: TaskStatus;
  statusMessage?: string;
  createdAt: string;
  lastUpdatedAt: string;
  ttlMs: number;
  pollIntervalMs: number;
}

/** The tasks of one serving entry (one HTTP server, one stdio connection). */
export class TaskStore {
  readonly #tasks = new Map<string, TaskRecord>();
  readonly #now: () => number;
  readonly #maxRunning: number;
  readonly #maxHeld: number;

  constructor(options: { now?: () => number; maxRunning?: number; maxHeld?: number } = {}) {
    this.#now = options.now ?? Date.now;
    this.#maxRunning = options.maxRunning ?? MAX_RUNNING_TASKS_PER_CALLER;
    this.#maxHeld = options.maxHeld ?? MAX_TASKS_PER_CALLER;
  }

  /**
   * Starts `run` as a task of `owner`: resolves once the task is readable (the caller answers the
   * `CreateTaskResult` after that). `run` gets the signal `tasks/cancel` aborts, and a way to say
   * how far it got; what it resolves to is the task's result, what it throws its protocol error.
   * Why not, instead, when `owner` already holds {@link MAX_TASKS_PER_CALLER} tasks or runs
   * {@link MAX_RUNNING_TASKS_PER_CALLER} of them.
   */
  create(
    owner: string,
    run: (signal: AbortSignal, status: (message: string) => void) => Promise<CallToolResult>,
  ): TaskView | { refused: string } {
    this.#sweep();
    let held = 0;
    let running = 0;
    for (const t of this.#tasks.values())
      if (t.owner === owner) {
        held++;
        if (t.status === 'working') running++;
      }
    if (running >= this.#maxRunning)
      return { refused: `this caller already runs ${running} tasks, the most at once; wait for one to end or cancel one (tasks/cancel)` };
    if (held >= this.#maxHeld)
      return {
        refused: `this caller already holds ${held} tasks, the most forge keeps (ended ones are kept an hour); wait for some to expire`,
      };
    const at = new Date(this.#now()).toISOString();
    const task: TaskRecord = {
      taskId: `task-${randomBytes(16).toString('hex')}`,
      owner,
      status: 'working',
      createdAt: at,
      lastUpdatedAt: at,
      abort: new AbortController(),
    };
    this.#tasks.set(task.taskId, task);
    const touch = () => {
      task.lastUpdatedAt = new Date(this.#now()).toISOString();
    };
    const end = (status: TaskStatus) => {
      if (task.status !== 'working') return;
      task.status = task.abort.signal.aborted ? 'cancelled' : status;
      task.endedAt = this.#now();
      touch();
    };
    void run(task.abort.signal, (message) => {
      if (task.status !== 'working') return;
      task.statusMessage = message;
      touch();
    }).then(
      (result) => {
        task.result = result;
        end('completed');
      },
      (err: unknown) => {
        task.error = { code: -32603, message: `forge mcp: ${(err as Error).message}` };
        end('failed');
      },
    );
    return view(task);
  }

  /** The task `taskId` of `owner` with its result or error once it ended; undefined when unknown to that owner. */
  get(owner: string, taskId: string): (TaskView & { result?: CallToolResult; error?: TaskRecord['error'] }) | undefined {
    this.#sweep();
    const t = this.#tasks.get(taskId);
    if (!t || t.owner !== owner) return undefined;
    return {
      ...view(t),
      ...(t.status === 'completed' && t.result ? { result: t.result } : {}),
      ...(t.status === 'failed' && t.error ? { error: t.error } : {}),
    };
  }

  /** Cancels the task (kills its sandbox); false when unknown to `owner`. A task that ended stays as it was. */
  cancel(owner: string, taskId: string): boolean {
    const t = this.#tasks.get(taskId);
    if (!t || t.owner !== owner) return false;
    if (t.status === 'working') {
      t.abort.abort(new Error('the client cancelled the task (tasks/cancel)'));
      t.statusMessage = 'cancelling: the sandbox is being stopped';
    }
    return true;
  }

  /** Cancels every running task (the server is closing). */
  cancelAll(reason: string): void {
    for (const t of this.#tasks.values()) if (t.status === 'working') t.abort.abort(new Error(reason));
  }

  #sweep(): void {
    const now = this.#now();
    for (const [id, t] of this.#tasks) if (t.endedAt !== undefined && now - t.endedAt > TASK_TTL_MS) this.#tasks.delete(id);
  }
}

function view(t: TaskRecord): TaskView {
  return {
    taskId: t.taskId,
    status: t.status,
    ...(t.statusMessage !== undefined ? { statusMessage: t.statusMessage } : {}),
    createdAt: t.createdAt,
    lastUpdatedAt: t.lastUpdatedAt,
    ttlMs: TASK_TTL_MS,
    pollIntervalMs: TASK_POLL_MS,
  };
}

/** Whether the request's client declared the tasks extension (2026: in the request's `_meta` envelope). */
export function declaresTasks(envelope: Record<string, unknown> | undefined): boolean {
  const caps = envelope?.[CLIENT_CAPABILITIES_META_KEY] as { extensions?: Record<string, unknown> } | undefined;
  return caps?.extensions?.[TASKS_EXTENSION] !== undefined;
}
