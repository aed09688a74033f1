/**
 * Server-sent events read from a fetch body. EventSource cannot send the API key header, so the log
 * pages stream with fetch and parse the events here (the text/event-stream format of the HTML
 * standard: `field: value` lines, a blank line ends an event, lines starting with `:` are comments).
 */

export interface ServerEvent {
  event: string;
  data: string;
  /** The event's `id:`, when it had one (log lines carry their cursor there). */
  id: string | null;
}

/** Yields the events completed by each chunk read, together: a burst of log lines is shown in one go. */
export async function* readServerEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<ServerEvent[]> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let event = '';
  let data: string[] = [];
  let id: string | null = null;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      const events: ServerEvent[] = [];
      let newline: number;
      while ((newline = buffer.search(/\r\n|\r|\n/)) !== -1) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer.startsWith('\r\n', newline) ? 2 : 1));
        if (line === '') {
          if (data.length > 0) events.push({ event: event || 'message', data: data.join('\n'), id });
          event = '';
          data = [];
          id = null;
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon === -1 ? line : line.slice(0, colon);
        const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'event') event = value;
        else if (field === 'data') data.push(value);
        else if (field === 'id') id = value;
      }
      if (events.length > 0) yield events;
    }
  } finally {
    reader.releaseLock();
  }
}
