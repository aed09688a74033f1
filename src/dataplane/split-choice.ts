/**
 * Which revision of a split route serves a request in the built-in edge (docs/app-urls.md, "Traffic
 * split"), the same rules as the HAProxy edge's (src/dataplane/edge-haproxy-config.ts), in this order:
 *
 * 1. a LangGraph thread named in the path (`/threads/<id>/...`) goes to the revision that first served it
 *    while this split lasts (a pin in a bounded map: past THREAD_PINS the least recently used goes);
 * 2. else `X-Slipway-Sticky: <client id>`: a hash of the id against the weight (the same id, the same
 *    revision; a wider split moves some clients of the base to the second revision, never back);
 * 3. else the `slipway_split` cookie the edge set on an earlier answer (the revision it names);
 * 4. else, for a thread, a hash of the thread id against the weight; for any other request a random
 *    choice by the weight.
 *
 * Rule 4's hash is what makes a lost pin harmless: a thread whose pin was pushed out (by a client naming
 * many threads, say) is placed again by the same rules, so while the weight is the same it lands where it
 * was (tested by test/attack/split-thread-flood.test.ts).
 *
 * A first answer (and any answer whose cookie names another revision) sets the cookie.
 */
import type { IncomingMessage } from 'node:http';
import { SPLIT_COOKIE, STICKY_HEADER, type RouteSplit } from './app-backends.ts';

/** Thread pins kept at most by an edge (either kind; per process); past it the least recently used goes. */
export const THREAD_PINS = 100_000;

export type SplitSide = 'base' | 'split';

/** The thread a LangGraph path names: `/threads/<id>` or `/threads/<id>/...`; null for any other path. */
export function threadOf(url: string): string | null {
  const match = /^\/threads\/([^/?#]{1,128})(?:[/?#]|$)/.exec(url);
  return match ? match[1]! : null;
}

/** FNV-1a over the text, as a percent bucket 0-99. */
export function percentOf(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash % 100;
}

function cookieValue(header: string | undefined): string | null {
  if (header === undefined) return null;
  for (const pair of header.split(';')) {
    const at = pair.indexOf('=');
    if (at > 0 && pair.slice(0, at).trim() === SPLIT_COOKIE) return pair.slice(at + 1).trim();
  }
  return null;
}

export function createSplitChooser(random: () => number = Math.random, capacity: number = THREAD_PINS) {
  /** `<label> <base> <split> <thread>` to the side that first served the thread; least recently used first. */
  const pins = new Map<string, SplitSide>();

  return {
    /** The side that serves the request, and the cookie to set on its answer (null: none). */
    choose(label: string, split: RouteSplit, req: IncomingMessage): { side: SplitSide; cookie: string | null } {
      const thread = threadOf(req.url ?? '/');
      const pinKey = thread === null ? null : `${label} ${split.baseRevisionId} ${split.revisionId} ${thread}`;
      const cookie = cookieValue(req.headers.cookie);
      const sticky = req.headers[STICKY_HEADER];
      const pinned = pinKey === null ? undefined : pins.get(pinKey);
      let side = pinned;
      if (side === undefined && typeof sticky === 'string' && sticky !== '')
        side = percentOf(sticky) < split.weight ? 'split' : 'base';
      if (side === undefined && cookie === split.revisionId) side = 'split';
      if (side === undefined && cookie === split.baseRevisionId) side = 'base';
      if (side === undefined && thread !== null) side = percentOf(thread) < split.weight ? 'split' : 'base';
      side ??= random() * 100 < split.weight ? 'split' : 'base';
      if (pinKey !== null) {
        // Most recently used last: the first key is the one to forget.
        if (pinned !== undefined) pins.delete(pinKey);
        pins.set(pinKey, side);
        if (pins.size > capacity) pins.delete(pins.keys().next().value!);
      }
      const revision = side === 'split' ? split.revisionId : split.baseRevisionId;
      return {
        side,
        cookie: cookie === revision ? null : `${SPLIT_COOKIE}=${revision}; Path=/; HttpOnly; SameSite=Lax`,
      };
    },

    /** The pins held now. */
    size: () => pins.size,

    /** Forgets the pins of a label's split (it ended or changed revisions). */
    forget(label: string): void {
      for (const key of pins.keys()) if (key.startsWith(`${label} `)) pins.delete(key);
    },
  };
}
