/** Tool calls as tasks, and the `tasks/*` requests of the 2026-07-28 era (see tasks.ts). */
import type { CallContext, Forge } from '@forge/runner';
import {
  type CallToolResult,
  fromJsonSchema,
  MissingRequiredClientCapabilityError,
  ProtocolError,
  ProtocolErrorCode,
  type Server,
  type ServerContext,
} from '@modelcontextprotocol/server';
import type { Inflight } from './inflight.js';
import type { ToolView } from './schema.js';
import { declaresTasks, TASKS_EXTENSION, type TaskStore } from './tasks.js';
import { toResult, withFiles } from './toolResults.js';

/**
 * Starts the call as a task of `tasks.owner` and answers its `CreateTaskResult`. The call counts
 * as in flight until it ends (a shutdown waits for it, then kills it like any call); its progress
 * events become the task's status message.
 */
export function startTask(
  tasks: { store: TaskStore; owner: string },
  forge: Forge,
  name: string,
  args: Record<string, unknown>,
  view: ToolView | undefined,
  ctx: CallContext,
  inflight: Inflight,
): CallToolResult {
  const release = inflight.begin();
  const created = tasks.store.create(tasks.owner, async (signal, status) => {
    try {
      const callCtx = {
        ...ctx,
        signal: AbortSignal.any([signal, ...(ctx.signal ? [ctx.signal] : [])]),
        onEvent: (e: { type: string; progress?: number; total?: number; message?: string }) => {
          if (e.type !== 'progress') return;
          status(e.message ?? `${e.progress}${e.total !== undefined ? ` of ${e.total}` : ''}`);
        },
      } as CallContext;
      const envelope = await forge.callTool(name, args, callCtx);
      return await withFiles(toResult(envelope, view), envelope, forge, ctx);
    } finally {
      release();
    }
  });
  if ('refused' in created) {
    release();
    throw new ProtocolError(
      ProtocolErrorCode.InternalError,
      `too many tasks: ${created.refused}; or call ${name} without the ${TASKS_EXTENSION} extension`,
    );
  }
  return { resultType: 'task', ...created } as unknown as CallToolResult;
}

const TASK_ID = fromJsonSchema<{ taskId: string }>({
  type: 'object',
  properties: { taskId: { type: 'string', minLength: 1, maxLength: 256 } },
  required: ['taskId'],
});

/** `tasks/get`, `tasks/cancel` and `tasks/update`, each only for a request that declared the extension. */
export function addTaskHandlers(server: Server, tasks: { store: TaskStore; owner: string }): void {
  const gate = (ctx: ServerContext) => {
    if (!declaresTasks(ctx.mcpReq.envelope))
      throw new MissingRequiredClientCapabilityError(
        { requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } } },
        `tasks need the ${TASKS_EXTENSION} extension in the request's client capabilities`,
      );
  };
  const unknown = (taskId: string) =>
    new ProtocolError(
      ProtocolErrorCode.InvalidParams,
      `unknown task "${taskId.slice(0, 80)}": it never existed, expired, or belongs to another caller`,
    );
  server.setRequestHandler('tasks/get', { params: TASK_ID }, async (params, ctx) => {
    gate(ctx);
    const task = tasks.store.get(tasks.owner, params.taskId);
    if (!task) throw unknown(params.taskId);
    return task as never;
  });
  server.setRequestHandler('tasks/cancel', { params: TASK_ID }, async (params, ctx) => {
    gate(ctx);
    if (!tasks.store.cancel(tasks.owner, params.taskId)) throw unknown(params.taskId);
    return {} as never;
  });
  server.setRequestHandler('tasks/update', { params: TASK_ID }, async (params, ctx) => {
    gate(ctx);
    // forge tools never ask for input: there is nothing to update, but the task must exist.
    if (!tasks.store.get(tasks.owner, params.taskId)) throw unknown(params.taskId);
    return {} as never;
  });
}
