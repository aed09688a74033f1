import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { test } from 'node:test';
import { PER_TEST, eventually } from './wait.ts';

test('eventually resolves with the first truthy value of a synchronous or asynchronous check', PER_TEST, async () => {
  await assert.rejects(
    eventually('a process that exited', () => {
      throw new Error('the process exited with code 1');
    }),
    /the process exited with code 1/,
  );
  let calls = 0;
  assert.equal(await eventually('the third call', () => ++calls >= 3 && calls, { everyMs: 1 }), 3);
  let later = 0;
  const value = await eventually('an answer', async () => (++later === 2 ? { answer: 42 } : null), { everyMs: 1 });
  assert.deepEqual(value, { answer: 42 });
});

test(
  'a check that throws fails the wait, or with retryErrors is "not yet" and named in the failure',
  PER_TEST,
  async () => {
    let calls = 0;
    assert.equal(
      await eventually(
        'no more errors',
        () => {
          if (++calls < 3) throw new Error('not ready');
          return 'ready';
        },
        { everyMs: 1, retryErrors: true },
      ),
      'ready',
    );
    await assert.rejects(
      eventually(
        'the door to open',
        () => {
          throw new Error('the door is locked');
        },
        { seconds: 0.2, everyMs: 1, retryErrors: true },
      ),
      /still waiting for the door to open after 0\.2 s .*the door is locked/,
    );
  },
);

test('past its deadline a wait names what it waited for and what it last saw', PER_TEST, async () => {
  let n = 0;
  await assert.rejects(
    eventually('five', () => ++n > 1e9 && n, { seconds: 0.2, everyMs: 1 }),
    /still waiting for five .*gave false/,
  );
  await assert.rejects(
    eventually('a status', async () => null, { seconds: 0.2, describe: () => 'status BUILDING' }),
    /still waiting for a status after 0\.2 s .*Last seen: status BUILDING/,
  );
});

test('a check that never answers still fails at the deadline', PER_TEST, async () => {
  await assert.rejects(
    eventually('an answer that never comes', () => new Promise<never>(() => {}), { seconds: 0.2 }),
    /still waiting for an answer that never comes after 0\.2 s .*no check has finished/,
  );
});

test('woken by changes, a synchronous check sees a state that lasts only a moment', PER_TEST, async () => {
  const changes = new EventEmitter();
  let state = 'idle';
  const seen = eventually('the moment of "busy"', () => state === 'busy' && state, {
    everyMs: 60_000,
    wake: (recheck) => {
      changes.on('change', recheck);
      return () => changes.off('change', recheck);
    },
  });
  state = 'busy';
  changes.emit('change');
  state = 'idle';
  changes.emit('change');
  assert.equal(await seen, 'busy');
  assert.equal(changes.listenerCount('change'), 0, 'the wait stopped listening once it was done');
});
