/**
 * What the agent reads of a Gateway controller's word on an endpoint's HTTPRoute (listener/route-status.ts):
 * the route's `status.parents` entry for the configured Gateway, as a controller writes it (Envoy Gateway,
 * Istio and the like write one entry per parentRef they handle, with Accepted and ResolvedRefs); a word
 * written for an older generation of the route says nothing of the route as it is now.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { routeVerdict } from '@slipway/listener/route-status';
import type { ObservedObject } from '@slipway/listener/kube-objects';

const parent = { namespace: 'gateways', name: 'public' };
const condition = (
  type: string,
  status: 'True' | 'False',
  reason: string,
  observedGeneration: number,
  message = '',
) => ({
  type,
  status,
  reason,
  message,
  observedGeneration,
  lastTransitionTime: '2026-12-06T07:00:00Z',
});
const route = (generation: number, parents: unknown[]): ObservedObject => ({
  apiVersion: 'gateway.networking.k8s.io/v1',
  kind: 'HTTPRoute',
  metadata: { name: 'support-agent--production', namespace: 'agents', generation },
  status: { parents },
});
const entry = (conditions: unknown[], ref: Record<string, string> = { name: 'public', namespace: 'gateways' }) => ({
  parentRef: { group: 'gateway.networking.k8s.io', kind: 'Gateway', ...ref },
  controllerName: 'gateway.envoyproxy.io/gatewayclass-controller',
  conditions,
});

describe('route status', () => {
  test('accepted and resolved at the current generation: accepted', () => {
    const r = route(3, [
      entry([condition('Accepted', 'True', 'Accepted', 3), condition('ResolvedRefs', 'True', 'ResolvedRefs', 3)]),
    ]);
    assert.deepEqual(routeVerdict(r, parent), { state: 'accepted' });
  });

  test('a word on an older generation (the weights changed since) is no word yet', () => {
    const r = route(4, [
      entry([condition('Accepted', 'True', 'Accepted', 3), condition('ResolvedRefs', 'True', 'ResolvedRefs', 3)]),
    ]);
    assert.equal(routeVerdict(r, parent).state, 'pending');
  });

  test("a refusal or an unresolved backend at the current generation: refused, with the controller's words", () => {
    const refused = route(2, [
      entry([
        condition('Accepted', 'False', 'NotAllowedByListeners', 2, 'No listener allows routes from namespace agents'),
        condition('ResolvedRefs', 'True', 'ResolvedRefs', 2),
      ]),
    ]);
    assert.deepEqual(routeVerdict(refused, parent), {
      state: 'refused',
      message: 'No listener allows routes from namespace agents (Accepted NotAllowedByListeners)',
    });
    const unresolved = route(2, [
      entry([
        condition('Accepted', 'True', 'Accepted', 2),
        condition('ResolvedRefs', 'False', 'BackendNotFound', 2, 'Service agents/x not found'),
      ]),
    ]);
    assert.equal(routeVerdict(unresolved, parent).state, 'refused');
  });

  test("another Gateway's entry, no entry, or no route seen: pending", () => {
    const other = route(1, [
      entry([condition('Accepted', 'True', 'Accepted', 1), condition('ResolvedRefs', 'True', 'ResolvedRefs', 1)], {
        name: 'internal',
        namespace: 'gateways',
      }),
    ]);
    assert.equal(routeVerdict(other, parent).state, 'pending');
    assert.equal(routeVerdict(route(1, []), parent).state, 'pending');
    assert.equal(routeVerdict(undefined, parent).state, 'pending');
  });
});
