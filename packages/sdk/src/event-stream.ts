/**
 * Reading a `text/event-stream` body (the followed revision log, docs/logs.md) as the HTML standard's
 * EventSource does: fields `event`, `data` (several join with newlines) and `id`; comments (the
 * service's `: heartbeat`) skipped; an event dispatched at each blank line. EventSource itself is not
 * used because it cannot send the API key header.
 */

export interface ServerSentEvent {
  event: string;
  data: string;
  /** The event's id (for the log: the cursor of its line), or null when it had none. */
  id: string | null;
}

export async function* readEventStream(body: ReadableStream<Uint8Array>): AsyncGenerator<ServerSentEvent> {
  const decoder = new TextDecoder();
  let buffer = '';
  let event = '';
  let data: string[] = [];
  let id: string | null = null;
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      // A line ends at \n, \r\n or \r; a \r last in the buffer may be the first half of \r\n.
      for (;;) {
        const match = /\r\n|\n|\r(?=[^\n])/.exec(buffer);
        if (!match) break;
        const line = buffer.slice(0, match.index);
        buffer = buffer.slice(match.index + match[0].length);
        if (line === '') {
          if (data.length > 0) yield { event: event || 'message', data: data.join('\n'), id };
          event = '';
          data = [];
          id = null;
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon === -1 ? line : line.slice(0, colon);
        const raw = colon === -1 ? '' : line.slice(colon + 1);
        const value = raw.startsWith(' ') ? raw.slice(1) : raw;
        if (field === 'event') event = value;
        else if (field === 'data') data.push(value);
        else if (field === 'id' && !value.includes('\0')) id = value;
      }
      // A stream cut in the middle of an event drops that event, as EventSource does.
      if (done) return;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}
