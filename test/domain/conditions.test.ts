/**
 * The one table of deployment conditions (src/domain/conditions.ts): each rule is a move the deployment
 * state machine allows, none leaves a deployment being deleted, a condition of the serving revision moves
 * only a deployment one serves, and docs/lifecycle.md lists exactly the table. How each data plane is
 * held to it is test/listener-protocol/one-condition-rule.test.ts.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { DEPLOYMENT_CONDITIONS, DEPLOYMENT_CONDITION_NAMES, conditionMove } from '../../src/domain/conditions.ts';
import { DEPLOYMENT_STATUSES, assertDeploymentTransition } from '../../src/domain/states.ts';

const ROOT = path.resolve(import.meta.dirname, '..', '..');

test('every condition moves a deployment only along the state machine, and never one being deleted', () => {
  for (const condition of DEPLOYMENT_CONDITION_NAMES) {
    const rule = DEPLOYMENT_CONDITIONS[condition];
    assert.ok(rule.from.length > 0, condition);
    assert.ok(rule.reportedBy.length > 0, condition);
    for (const from of rule.from) assert.doesNotThrow(() => assertDeploymentTransition(from, rule.status), condition);
    assert.equal(conditionMove(condition, 'AWAITING_DELETE'), null, condition);
    assert.equal(conditionMove(condition, rule.status), null, `${condition} where it leads already`);
  }
});

test('a condition that makes a deployment UNKNOWN moves only one a revision serves, and recovered only back', () => {
  for (const condition of DEPLOYMENT_CONDITION_NAMES) {
    const rule = DEPLOYMENT_CONDITIONS[condition];
    if (rule.status === 'UNKNOWN') assert.deepEqual(rule.from, ['READY'], condition);
  }
  assert.deepEqual(DEPLOYMENT_CONDITIONS.recovered, {
    status: 'READY',
    from: ['UNKNOWN'],
    reportedBy: ['local', 'listener'],
  });
  const moves = DEPLOYMENT_STATUSES.map((s) => `${s}->${conditionMove('crash_loop', s) ?? s}`);
  assert.deepEqual(moves, [
    'AWAITING_DATABASE->AWAITING_DATABASE',
    'READY->UNKNOWN',
    'UNUSED->UNUSED',
    'AWAITING_DELETE->AWAITING_DELETE',
    'UNKNOWN->UNKNOWN',
  ]);
});

test('docs/lifecycle.md lists every condition with its rule', async () => {
  const doc = await fs.readFile(path.join(ROOT, 'docs', 'lifecycle.md'), 'utf8');
  const rows = [...doc.matchAll(/^\| `([a-z_]+)` \| [^|]+ \| ([A-Z_, ]+) \| ([A-Z_]+) \|$/gm)].map(
    ([, name, from, to]) => `${name}: ${from!.trim()} -> ${to}`,
  );
  const table = DEPLOYMENT_CONDITION_NAMES.map(
    (c) => `${c}: ${DEPLOYMENT_CONDITIONS[c].from.join(', ')} -> ${DEPLOYMENT_CONDITIONS[c].status}`,
  );
  assert.deepEqual(rows, table);
});
