import type { ToolMemory } from './memory.js';
import { toolNameProblem, wireKey } from './name.js';
import type { Collisions, ToolStore } from './toolStore.js';
import type { Failure, Scope } from './types.js';
import { wireTaken } from './wire.js';

/**
 * The wire names this registry cannot hand out: the built-ins', those of tools in memory, and
 * those of writes decided but not yet in memory. The stores lock per scope, so two scopes' writes
 * of `a.b` and `a__b` would not see each other without the claims of writes in flight.
 */
export class NameClaims {
  readonly #memory: ToolMemory;
  /** Built-ins by their lower-cased wire name (each is its own wire name). */
  readonly #builtinWires = new Map<string, string>();
  /** Writes decided but not yet in memory, by wire key. */
  readonly #inFlight = new Map<string, { name: string; scope: Scope }[]>();

  constructor(builtins: Iterable<string>, memory: ToolMemory) {
    this.#memory = memory;
    for (const b of builtins) if (toolNameProblem(b) === undefined) this.#builtinWires.set(wireKey(b), b);
  }

  /**
   * Why writing `name` into `store` would give two tools one wire name, or undefined. Asked under
   * the name's lock (which colliding names share within a scope): a built-in, a record in the
   * store now (`collisions`, read under the lock), a tool in memory, a write of this registry in flight.
   */
  async wireClash(
    name: string,
    store: ToolStore,
    collisions: () => Promise<Collisions>,
    kind: 'name_taken' | 'promote_conflict',
  ): Promise<Failure<string> | undefined> {
    const key = wireKey(name);
    const builtin = this.#builtinWires.get(key);
    if (builtin !== undefined && builtin !== name) return wireTaken(kind, name, builtin, 'built-in');
    const onDisk = (await collisions()).wires[0];
    if (onDisk !== undefined) return wireTaken(kind, name, onDisk, `${store.scope} scope`);
    const seen = this.#memory.wireVariant(name);
    if (seen) return wireTaken(kind, name, seen.tool.name, `${seen.scope} scope`);
    // A case variant in flight too: its own check reads memory, which does not have it yet.
    const racing = this.#inFlight.get(key)?.find((w) => w.name !== name);
    if (racing) return wireTaken(kind, name, racing.name, `${racing.scope} scope, being written now`);
    return undefined;
  }

  /**
   * Runs a locked write of `name` into `scope`; once `write` calls `claim` (it has decided to
   * write), `wireClash` sees the name until `write` settles, by which time memory has it.
   */
  async claimed<R>(name: string, scope: Scope, write: (claim: () => void) => Promise<R>): Promise<R> {
    const key = wireKey(name);
    const entry = { name, scope };
    let held = false;
    try {
      return await write(() => {
        if (held) return; // a put that decides again (a foreign file appeared) claims once
        held = true;
        const list = this.#inFlight.get(key);
        if (list) list.push(entry);
        else this.#inFlight.set(key, [entry]);
      });
    } finally {
      if (held) {
        const list = this.#inFlight.get(key) ?? [];
        list.splice(list.indexOf(entry), 1);
        if (list.length === 0) this.#inFlight.delete(key);
      }
    }
  }
}
