/**
 * Output as revision log lines (docs/logs.md): raw chunks of a process's stdout and stderr are decoded
 * and split on newlines (a partial line waits for its newline or for `endPartialLines()`), cleaned of
 * escape sequences and control characters (after a carriage return only what follows is kept), cut at
 * MAX_LINE_CHARS, and redacted of the revision's secrets (src/dataplane/secret-masks.ts). What becomes of
 * a finished line, batching and storing it, is src/dataplane/log-writer.ts's concern.
 */
import { StringDecoder } from 'node:string_decoder';
import type { RevisionLogLine } from '../domain/data-plane.ts';
import { createRedactor } from './secret-masks.ts';

/** Longest stored line; longer ones are cut (a minified bundle printed whole is not worth keeping). */
export const MAX_LINE_CHARS = 16 * 1024;
const CUT_MARK = ` [line cut: longer than ${MAX_LINE_CHARS} characters]`;
// CSI (colours, cursor moves), OSC (titles, links; ended by BEL or ST), then any other escape pair.
const ANSI =
  // eslint-disable-next-line no-control-regex -- escape sequences start with ESC (or CSI) and OSC ends with BEL: matching them is the point
  /\u001b\[[0-?]*[ -/]*[@-~]|\u009b[0-?]*[ -/]*[@-~]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)|\u001b[@-Z\\-_]/g;
// Control characters other than tab; NUL in particular, which PostgreSQL text refuses.
// eslint-disable-next-line no-control-regex -- control characters are exactly what this strips
const CONTROL = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f]/g;

/** One line of output as the terminal would finally show it, without escape sequences. */
function cleanLine(raw: string): string {
  let text = raw.replace(/\r+$/, '');
  const cr = text.lastIndexOf('\r');
  if (cr !== -1) text = text.slice(cr + 1);
  return text.replace(ANSI, '').replace(CONTROL, '');
}

type OutputStream = 'stdout' | 'stderr';

export interface LogLineSplitter {
  /** Raw output of a process (chunks may split lines and characters). */
  write(stream: OutputStream, chunk: Buffer | string): void;
  /** A line (or several, on newlines) written by the platform itself. */
  system(line: string): void;
  /** Ends unterminated lines (the process has stopped or the caller wants them now). */
  endPartialLines(): void;
}

/** Splits output into finished lines, each given to `accept` cleaned, cut and redacted of `secrets`. */
export function createLogLineSplitter(
  secrets: string[],
  accept: (stream: RevisionLogLine['stream'], line: string) => void,
): LogLineSplitter {
  const redactor = createRedactor(secrets);
  // A line without a newline is cut once this long: room for escape sequences that cleaning removes,
  // and for a secret that straddles the cut to be seen whole.
  const overflowAt = 2 * MAX_LINE_CHARS + redactor.longest;
  const decoders: Record<OutputStream, StringDecoder> = {
    stdout: new StringDecoder('utf8'),
    stderr: new StringDecoder('utf8'),
  };
  const partial: Record<OutputStream, string> = { stdout: '', stderr: '' };
  // After a cut, the rest of that line (up to its newline) is dropped.
  const discarding: Record<OutputStream, boolean> = { stdout: false, stderr: false };

  const finishLine = (raw: string, truncated: boolean): string => {
    const text = cleanLine(raw);
    if (!truncated && text.length <= MAX_LINE_CHARS) return redactor.redact(text);
    const cut = redactor.safeCut(text, Math.min(text.length, MAX_LINE_CHARS), truncated);
    return redactor.redact(text.slice(0, cut)) + CUT_MARK;
  };

  const splitLines = (stream: OutputStream, text: string) => {
    const buffer = partial[stream] + text;
    let start = 0;
    for (let newline = buffer.indexOf('\n'); newline !== -1; newline = buffer.indexOf('\n', start)) {
      if (discarding[stream]) discarding[stream] = false;
      else accept(stream, finishLine(buffer.slice(start, newline), false));
      start = newline + 1;
    }
    let rest = buffer.slice(start);
    if (discarding[stream]) rest = '';
    else if (rest.length > overflowAt) {
      accept(stream, finishLine(rest, true));
      rest = '';
      discarding[stream] = true;
    }
    partial[stream] = rest;
  };

  const endPartialLines = () => {
    for (const stream of ['stdout', 'stderr'] as const) {
      const rest = partial[stream] + decoders[stream].end();
      partial[stream] = '';
      if (rest.length > 0 && !discarding[stream]) accept(stream, finishLine(rest, false));
      discarding[stream] = false;
    }
  };

  return {
    write(stream, chunk) {
      splitLines(stream, typeof chunk === 'string' ? chunk : decoders[stream].write(chunk));
    },
    system(line) {
      for (const part of line.split('\n')) accept('system', finishLine(part, false));
    },
    endPartialLines,
  };
}
