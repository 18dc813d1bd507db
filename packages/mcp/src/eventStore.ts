import type { EventId, EventStore, JSONRPCMessage, StreamId } from '@modelcontextprotocol/server';

/** Most events one session keeps for replay. */
const MAX_EVENTS = 1000;
/** Most bytes (of JSON) one session keeps for replay. */
const MAX_BYTES = 8 * 1024 * 1024;

/**
 * The messages of one 2025-era HTTP session's SSE streams, kept so a client that lost a stream
 * can resume it with `Last-Event-ID` (Streamable HTTP resumability). Bounded: the oldest events
 * go first past {@link MAX_EVENTS} or {@link MAX_BYTES}; a client asking to resume after an
 * event no longer kept gets nothing replayed (the SDK then answers as for an unknown id).
 * Event ids are `<stream id>:<sequence>`, so the stream of an id is known without a lookup.
 */
export class SessionEventStore implements EventStore {
  readonly #events: { id: EventId; stream: StreamId; message: JSONRPCMessage; bytes: number }[] = [];
  #bytes = 0;
  #seq = 0;

  async storeEvent(streamId: StreamId, message: JSONRPCMessage): Promise<EventId> {
    const id = `${streamId}:${++this.#seq}`;
    const bytes = JSON.stringify(message).length;
    this.#events.push({ id, stream: streamId, message, bytes });
    this.#bytes += bytes;
    while (this.#events.length > MAX_EVENTS || this.#bytes > MAX_BYTES) {
      const old = this.#events.shift();
      if (old) this.#bytes -= old.bytes;
    }
    return id;
  }

  async getStreamIdForEventId(eventId: EventId): Promise<StreamId | undefined> {
    const colon = eventId.lastIndexOf(':');
    return colon > 0 ? eventId.slice(0, colon) : undefined;
  }

  async replayEventsAfter(
    lastEventId: EventId,
    { send }: { send: (eventId: EventId, message: JSONRPCMessage) => Promise<void> },
  ): Promise<StreamId> {
    const stream = (await this.getStreamIdForEventId(lastEventId)) ?? '';
    const at = this.#events.findIndex((e) => e.id === lastEventId);
    if (at < 0) return stream;
    for (const e of this.#events.slice(at + 1)) if (e.stream === stream) await send(e.id, e.message);
    return stream;
  }
}
