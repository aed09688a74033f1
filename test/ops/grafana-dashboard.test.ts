/**
 * deploy/grafana/slipway-apps.json: a dashboard Grafana imports (its shape), whose queries name only
 * series the service exports, so a renamed metric cannot leave the dashboard showing nothing.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import { test } from 'node:test';

const DASHBOARD = new URL('../../deploy/grafana/slipway-apps.json', import.meta.url);
const METRICS_SOURCES = ['metrics.ts', 'metrics-apps.ts'].map(
  (file) => new URL(`../../src/routes/${file}`, import.meta.url),
);

interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { x: number; y: number; w: number; h: number };
  targets: { refId: string; expr: string }[];
}

test('the dashboard is importable and queries only series the service exports', async () => {
  const dashboard = JSON.parse(await fs.readFile(DASHBOARD, 'utf8')) as {
    uid: string;
    title: string;
    schemaVersion: number;
    panels: Panel[];
    templating: { list: { name: string }[] };
  };
  assert.match(dashboard.uid, /^[a-z0-9-]{1,40}$/);
  assert.ok(dashboard.schemaVersion >= 36);
  assert.deepEqual(
    dashboard.templating.list.map((v) => v.name),
    ['datasource', 'deployment'],
  );
  const ids = dashboard.panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length, 'panel ids are unique');
  const source = (await Promise.all(METRICS_SOURCES.map((file) => fs.readFile(file, 'utf8')))).join('\n');
  const exported = new Set([...source.matchAll(/name: '(slipway_[a-z_]+)'/g)].map((m) => m[1]!));
  assert.ok(exported.has('slipway_app_requests_total'));
  for (const panel of dashboard.panels) {
    assert.ok(panel.gridPos.x + panel.gridPos.w <= 24, `${panel.title} fits the 24 columns`);
    assert.ok(panel.targets.length > 0, `${panel.title} has a query`);
    for (const target of panel.targets) {
      const series = [...target.expr.matchAll(/\b(slipway_[a-z_]+)\b/g)].map((m) => m[1]!);
      assert.ok(series.length > 0, `${panel.title}: ${target.expr}`);
      for (const name of series) assert.ok(exported.has(name), `${panel.title} queries ${name}, which is not exported`);
      // Balanced parentheses and braces: a query Prometheus can parse at least that far.
      for (const [open, close] of [
        ['(', ')'],
        ['{', '}'],
      ] as const)
        assert.equal(target.expr.split(open).length, target.expr.split(close).length, `${panel.title}: ${target.expr}`);
    }
  }
});
