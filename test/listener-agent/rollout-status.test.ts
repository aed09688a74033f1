/**
 * What a failed rollout's message says about pods that wait without a waiting reason (issue 25: a pod
 * that runs but never becomes ready was not named): pods the scheduler could not place, and containers
 * that run but are not ready, with the probe they wait for.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { waitingDetail } from '@slipway/listener/rollout-status';

const running = (name: string, ready: boolean, started = true) => ({
  name,
  ready,
  started,
  restartCount: 0,
  image: 'x',
  imageID: 'x',
  state: { running: { startedAt: new Date() } },
});

describe('rollout status: what the pods wait for', () => {
  test('a pod the scheduler cannot place is named with the scheduler’s words', () => {
    const pod: V1Pod = {
      metadata: { name: 'app-1' },
      spec: { containers: [{ name: 'app' }] },
      status: {
        phase: 'Pending',
        conditions: [
          {
            type: 'PodScheduled',
            status: 'False',
            reason: 'Unschedulable',
            message: '0/3 nodes are available: 3 Insufficient cpu.',
          },
        ],
      },
    };
    assert.equal(
      waitingDetail([pod]),
      '; pod app-1 is not scheduled (Unschedulable): 0/3 nodes are available: 3 Insufficient cpu.',
    );
  });

  test('containers that run but are not ready: their startup, readiness probe, or none', () => {
    const pod: V1Pod = {
      metadata: { name: 'app-2' },
      spec: {
        initContainers: [
          { name: 'migrate' },
          { name: 'proxy', restartPolicy: 'Always', startupProbe: { httpGet: { path: '/ready', port: 9901 } } },
        ],
        containers: [{ name: 'app', readinessProbe: { exec: { command: ['check', '--fast'] } } }, { name: 'other' }],
      },
      status: {
        initContainerStatuses: [running('migrate', false), running('proxy', false, false)],
        containerStatuses: [running('app', false), running('other', false), running('ok', true)],
      },
    };
    const detail = waitingDetail([pod]);
    assert.doesNotMatch(detail, /migrate/, 'an init container that runs is doing its work, not waiting');
    assert.match(
      detail,
      /container proxy of pod app-2 runs but is not ready: its startup probe \(HTTP GET \/ready on port 9901\) has not passed/,
    );
    assert.match(
      detail,
      /container app of pod app-2 runs but is not ready: its readiness probe \(command check --fast\) does not pass/,
    );
    assert.match(detail, /container other of pod app-2 runs but is not ready: it has not become ready/);
  });
});
