/**
 * The HAProxy edge's per-app counts (src/dataplane/edge-haproxy-stats.ts) as /metrics shows them: an app
 * counts from when it got its backend (not what an earlier app on that backend did), keeps its counts
 * across a restart of HAProxy (which counts from zero), and keeps the last counts while HAProxy does
 * not answer.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  createEdgeAccounts,
  parseBackendCounts,
  zeroCounts,
  type RawCounts,
} from '../../src/dataplane/edge-haproxy-stats.ts';

function counts(requests: number, ok: number, errors: number, ttimeMs = 0): RawCounts {
  const raw = zeroCounts();
  raw.requests = requests;
  raw.responses['2xx'] = ok;
  raw.responses['5xx'] = errors;
  raw.ttimeMs = ttimeMs;
  return raw;
}

const routes = (entries: Record<string, string>) => new Map(Object.entries(entries));

test("an app on a reused backend counts from when it got it, not the earlier app's requests", () => {
  const accounts = createEdgeAccounts();
  accounts.processStarted();
  accounts.open('support', 'app0', counts(40, 38, 2));
  const stats = accounts.read(routes({ support: 'app0' }), new Map([['app0', counts(45, 42, 3, 120)]]));
  const support = stats.get('support')!;
  assert.equal(support.requests, 5);
  assert.equal(support.responses['2xx'], 4);
  assert.equal(support.responses['5xx'], 1);
  assert.equal(support.averageResponseSeconds, 0.12);
});

test('the counts survive a restart of HAProxy, which counts from zero', () => {
  const accounts = createEdgeAccounts();
  accounts.processStarted();
  accounts.open('support', 'app0', zeroCounts());
  accounts.read(routes({ support: 'app0' }), new Map([['app0', counts(10, 10, 0)]]));
  accounts.processStarted();
  const after = accounts.read(routes({ support: 'app3' }), new Map([['app3', counts(2, 1, 1)]]));
  assert.equal(after.get('support')!.requests, 12);
  assert.equal(after.get('support')!.responses['2xx'], 11);
  assert.equal(after.get('support')!.responses['5xx'], 1);
});

test('while HAProxy does not answer, the last counts stand', () => {
  const accounts = createEdgeAccounts();
  accounts.processStarted();
  accounts.open('support', 'app0', zeroCounts());
  accounts.read(routes({ support: 'app0' }), new Map([['app0', counts(7, 7, 0)]]));
  const silent = accounts.read(routes({ support: 'app0' }), null);
  assert.equal(silent.get('support')!.requests, 7);
  // And across the restart that made it silent.
  accounts.processStarted();
  assert.equal(accounts.read(routes({ support: 'app0' }), null).get('support')!.requests, 7);
  assert.equal(
    accounts.read(routes({ support: 'app0' }), new Map([['app0', counts(1, 1, 0)]])).get('support')!.requests,
    8,
  );
});

test('an app not read yet shows nothing until HAProxy answers, then counts from that read', () => {
  const accounts = createEdgeAccounts();
  accounts.processStarted();
  const silent = accounts.read(routes({ support: 'app1' }), null).get('support')!;
  assert.equal(silent.requests, 0);
  assert.equal(silent.averageResponseSeconds, null);
  accounts.read(routes({ support: 'app1' }), new Map([['app1', counts(30, 30, 0)]]));
  const later = accounts.read(routes({ support: 'app1' }), new Map([['app1', counts(33, 33, 0)]]));
  assert.equal(later.get('support')!.requests, 3);
});

test('a removed app is forgotten: routed again, it counts afresh', () => {
  const accounts = createEdgeAccounts();
  accounts.processStarted();
  accounts.open('support', 'app0', zeroCounts());
  accounts.read(routes({ support: 'app0' }), new Map([['app0', counts(9, 9, 0)]]));
  accounts.read(routes({}), new Map([['app0', counts(9, 9, 0)]]));
  const again = accounts.read(routes({ support: 'app0' }), new Map([['app0', counts(9, 9, 0)]]));
  assert.equal(again.get('support')!.requests, 0);
});

test("HAProxy's `show stat` CSV gives each backend's counts, servers and frontends left out", () => {
  const csv = [
    '# pxname,svname,req_tot,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,ttime,',
    'app0,slot0,,0,3,0,0,0,0,5,',
    'app0,BACKEND,4,0,3,0,1,0,0,17,',
    'apps,FRONTEND,9,0,8,0,1,0,0,,',
  ].join('\n');
  const parsed = parseBackendCounts(csv);
  assert.deepEqual([...parsed.keys()], ['app0']);
  assert.deepEqual(parsed.get('app0'), {
    requests: 4,
    responses: { '1xx': 0, '2xx': 3, '3xx': 0, '4xx': 1, '5xx': 0, other: 0 },
    ttimeMs: 17,
  });
});

test('a switch to a new backend: both count until the old one drains, its requests in flight included, then only the new one', () => {
  const accounts = createEdgeAccounts();
  accounts.processStarted();
  accounts.open('support', 'app0', counts(100, 100, 0));
  accounts.read(routes({ support: 'app0' }), new Map([['app0', counts(110, 110, 0)]]));
  // Moved to app5, which served an earlier app: counted from now. app0 still has a request in flight.
  accounts.moved('support', 'app5', counts(50, 50, 0));
  const during = accounts.read(
    routes({ support: 'app5' }),
    new Map([
      ['app0', counts(111, 110, 0)],
      ['app5', counts(53, 53, 0, 40)],
    ]),
  );
  assert.equal(during.get('support')!.requests, 14);
  assert.equal(during.get('support')!.averageResponseSeconds, 0.04, "the mean is the current backend's");
  // The request in flight on app0 ended in a 5xx before app0 was retired: it counts.
  accounts.retired('support', 'app0', counts(111, 110, 1));
  // app0 goes back to the pool and serves another app: none of that is support's.
  const after = accounts.read(
    routes({ support: 'app5' }),
    new Map([
      ['app0', counts(500, 500, 0)],
      ['app5', counts(54, 54, 0)],
    ]),
  );
  assert.equal(after.get('support')!.requests, 15);
  assert.equal(after.get('support')!.responses['2xx'], 14);
  assert.equal(after.get('support')!.responses['5xx'], 1);
});

test('a backend retired after a restart of HAProxy was carried by the restart, not twice', () => {
  const accounts = createEdgeAccounts();
  accounts.processStarted();
  accounts.open('support', 'app0', zeroCounts());
  accounts.moved('support', 'app1', zeroCounts());
  accounts.read(
    routes({ support: 'app1' }),
    new Map([
      ['app0', counts(4, 4, 0)],
      ['app1', counts(6, 6, 0)],
    ]),
  );
  accounts.processStarted();
  accounts.retired('support', 'app0', null);
  const after = accounts.read(routes({ support: 'app1' }), new Map([['app1', counts(1, 1, 0)]]));
  assert.equal(after.get('support')!.requests, 11);
});
