/**
 * The agent heartbeats once per SLIPWAY_LISTENER_HEARTBEAT_SECONDS, plus once at once when a namespace
 * comes or goes (never sooner than a second after the last). Found against a real cluster: 39 to 55
 * heartbeats a minute per listener with the period at 10 s, each a write on the service, because the
 * wait between two returned at once. Counted over two minutes of a fake clock.
 */
import assert from 'node:assert/strict';
import { afterEach, describe } from 'node:test';
import type { ListenerClock } from '@slipway/listener/listener-agent';
import { startWorld, type World } from './harness.ts';
import { eventually } from '../support/wait.ts';
import { test } from '../support/limited-test.ts';

/** A clock that moves only when told; the agent's heartbeat loop is the only user of it. */
class FakeClock implements ListenerClock {
  private time = 0;
  private next = 1;
  private readonly timers = new Map<number, { at: number; fire: () => void }>();
  now(): number {
    return this.time;
  }
  setTimeout(fire: () => void, ms: number): number {
    const id = this.next++;
    this.timers.set(id, { at: this.time + Math.max(0, ms), fire });
    return id;
  }
  clearTimeout(id: unknown): void {
    this.timers.delete(id as number);
  }
  /** How many waits are pending: the loop is parked on the clock when there is one. */
  pending(): number {
    return this.timers.size;
  }
  /** Moves time on by `ms`, firing what falls due on the way. */
  advance(ms: number): void {
    const end = this.time + ms;
    for (;;) {
      const due = [...this.timers.entries()].filter(([, t]) => t.at <= end).sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) break;
      this.timers.delete(due[0]);
      this.time = Math.max(this.time, due[1].at);
      due[1].fire();
    }
    this.time = end;
  }
}

describe('listener agent: the heartbeat period', { timeout: 120_000 }, () => {
  let world: World;
  afterEach(async () => {
    await world.close();
  });

  test('one heartbeat per period, not one a second', async () => {
    const clock = new FakeClock();
    world = await startWorld({}, { heartbeatSeconds: 10 }, { clock });
    world.start();
    // The first heartbeat: once the namespace is watched.
    await world.slipway.waitFor(() => world.slipway.heartbeats.length >= 1);
    const first = world.slipway.heartbeats.length;
    // Two minutes, a second at a time, each time waiting for the loop to be parked on the clock again.
    for (let second = 0; second < 120; second++) {
      await eventually('the loop to wait on the clock', () => clock.pending() > 0, { everyMs: 0 });
      clock.advance(1_000);
      // A heartbeat that fell due is sent before the next second (it parks again once it is answered).
      await eventually('the loop to wait on the clock', () => clock.pending() > 0, { everyMs: 0 });
    }
    const beats = world.slipway.heartbeats.length - first;
    assert.ok(beats >= 11 && beats <= 13, `${beats} heartbeats in 120 s at a 10 s period (12 expected)`);
    assert.equal(world.slipway.heartbeats.at(-1)?.namespaces?.join(), 'agents', 'each says the namespace is watched');
  });
});
