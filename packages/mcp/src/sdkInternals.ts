/**
 * Every place forge leans on the MCP SDK's private or undocumented behaviour, written against
 * `@modelcontextprotocol/server` 2.4.0 and `@modelcontextprotocol/node` 2.1.2. Each function
 * names what it relies on; test/sdk-internals.test.ts pins each of those behaviours against the
 * installed SDK, so an upgrade that changes one fails there, naming it, and nowhere else.
 */
import type { IncomingMessage } from 'node:http';
import { type AuthInfo, type JSONRPCMessage, Server, type Transport, type TransportSendOptions } from '@modelcontextprotocol/server';
import { traceRequest } from './telemetry.js';

/** Thrown through the SDK's tools/call result check by a handler that started a task; see {@link TaskAnsweringServer}. */
class TaskCreated extends Error {
  constructor(readonly result: Record<string, unknown>) {
    super('task created');
  }
}

/**
 * The SDK's `Server`, letting a `tools/call` answer be a `CreateTaskResult` (`resultType:
 * "task"`): the SDK checks a tool result against `CallToolResult`, which would strip the task
 * fields, and has no runtime of the tasks extension. Every other answer goes through its checks.
 *
 * Relies on (server 2.4.0): `Server#_wrapHandler(method, handler)`, a protected hook that
 * `setRequestHandler` calls with the method name, whose `tools/call` wrapper validates the
 * handler's result and lets an error the handler throws pass out unchanged.
 */
export class TaskAnsweringServer extends Server {
  protected override _wrapHandler(method: string, handler: Parameters<Server['_wrapHandler']>[1]): ReturnType<Server['_wrapHandler']> {
    const wrapped = method === 'tools/call' ? this.#answeringTasks(method, handler) : super._wrapHandler(method, handler);
    // Every request in its OpenTelemetry span (telemetry.ts), around the SDK's own checks too.
    return (request, ctx) =>
      traceRequest(
        method,
        {
          request: request as { params?: Record<string, unknown> },
          id: ctx.mcpReq.id,
          meta: ctx.mcpReq._meta,
          sessionId: ctx.sessionId,
          protocolVersion:
            (ctx.mcpReq.envelope as Record<string, unknown> | undefined)?.[PROTOCOL_VERSION_META_KEY]?.toString() ??
            this.getNegotiatedProtocolVersion(),
        },
        () => wrapped(request, ctx),
      );
  }

  #answeringTasks(method: string, handler: Parameters<Server['_wrapHandler']>[1]): ReturnType<Server['_wrapHandler']> {
    const inner = super._wrapHandler(method, async (request, ctx) => {
      const result = await handler(request, ctx);
      if ((result as { resultType?: unknown }).resultType === 'task') throw new TaskCreated(result);
      return result;
    });
    return async (request, ctx) => {
      try {
        return await inner(request, ctx);
      } catch (err) {
        if (err instanceof TaskCreated) return err.result as Awaited<ReturnType<typeof inner>>;
        throw err;
      }
    };
  }
}

/** Where a 2026-07-28 request names its protocol version (its `_meta` envelope). */
const PROTOCOL_VERSION_META_KEY = 'io.modelcontextprotocol/protocolVersion';

/** What a server built here does with the messages of every transport it connects to. */
export interface TransportHooks {
  /**
   * Sees each incoming message before the SDK does; true when it answered the message itself
   * (the SDK then never sees it).
   */
  intercept(message: JSONRPCMessage, transport: Transport): boolean;
  /** Called before each outgoing message: the callback it returns runs once the transport took the message (its `send` settled). */
  answering(message: JSONRPCMessage): (() => void) | undefined;
}

/**
 * Installs `hooks` on every transport `server` connects to from now on.
 *
 * Relies on (server 2.4.0): `Protocol#connect` assigns its own `transport.onmessage` (calling a
 * handler set before it first), so the one installed after connect runs before the SDK's
 * dispatch; the SDK writes every answer with `transport.send(message, options)`, looked up on the
 * transport when it sends.
 */
export function hookTransports(server: Server, hooks: TransportHooks): void {
  const connect = server.connect.bind(server);
  server.connect = async (transport: Transport) => {
    watchSends(transport, hooks);
    await connect(transport);
    interceptMessages(transport, hooks);
  };
}

function watchSends(transport: Transport, hooks: TransportHooks): void {
  const send = transport.send.bind(transport);
  transport.send = async (message: JSONRPCMessage, options?: TransportSendOptions) => {
    const after = hooks.answering(message);
    if (!after) return send(message, options);
    try {
      return await send(message, options);
    } finally {
      after();
    }
  };
}

function interceptMessages(transport: Transport, hooks: TransportHooks): void {
  const next = transport.onmessage;
  transport.onmessage = (message, extra) => {
    if (hooks.intercept(message, transport)) return;
    next?.(message, extra);
  };
}

/**
 * Hands `authInfo` to the `createMcpHandler` factory that answers `req`.
 *
 * Relies on (node 2.1.2): `toNodeHandler` forwards an `auth` property of the Node request as the
 * handler's `authInfo` (said in its JSDoc, but not in the request's type).
 */
export function passAuthInfo(req: IncomingMessage, authInfo: AuthInfo): void {
  (req as IncomingMessage & { auth?: AuthInfo }).auth = authInfo;
}
