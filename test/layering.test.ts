/**
 * The shape of the code (docs/architecture.md): the own data plane and the pipeline do not import each
 * other (both see the contract in src/domain/data-plane.ts and the lifecycle), and the lifecycle
 * (src/service/lifecycle.ts, with the reports it applies in lifecycle-reports.ts) is the only module
 * that writes revision status, the active revision or a deployment's end. A test that fails when an import brings the cycle back or a second writer appears.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const SRC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'src');
const LIFECYCLE = [path.join(SRC, 'service', 'lifecycle.ts'), path.join(SRC, 'service', 'lifecycle-reports.ts')];

async function sourceFiles(): Promise<string[]> {
  const entries = await fs.readdir(SRC, { withFileTypes: true, recursive: true });
  return entries
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => path.join(e.parentPath, e.name))
    .sort();
}

/** What a file imports (static, type-only, re-exports and dynamic), resolved to paths under src/. */
async function importsOf(file: string): Promise<{ target: string; names: string }[]> {
  const text = await fs.readFile(file, 'utf8');
  const found: { target: string; names: string }[] = [];
  const pattern =
    /(?:import|export)\s*(type\s+)?([^'";]*?)\s*from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g;
  for (const match of text.matchAll(pattern)) {
    const specifier = match[3] ?? match[4]!;
    if (!specifier.startsWith('.')) continue;
    found.push({ target: path.resolve(path.dirname(file), specifier), names: match[2] ?? '' });
  }
  return found;
}

const area = (file: string) => path.relative(SRC, file).split(path.sep)[0];
const relative = (file: string) => path.relative(path.dirname(SRC), file);

test('src/dataplane and src/pipeline do not import each other', async () => {
  const crossing: string[] = [];
  for (const file of await sourceFiles()) {
    const from = area(file);
    if (from !== 'dataplane' && from !== 'pipeline') continue;
    for (const { target } of await importsOf(file)) {
      const to = area(target);
      if ((from === 'dataplane' && to === 'pipeline') || (from === 'pipeline' && to === 'dataplane'))
        crossing.push(`${relative(file)} -> ${relative(target)}`);
    }
  }
  assert.deepEqual(crossing, [], 'the contract between them is src/domain/data-plane.ts');
});

test('only the lifecycle writes revision status, the active revision and the end of a deployment', async () => {
  const writers = ['setRevisionStatus', 'setActiveRevision', 'deleteDeploymentRow'];
  // The lifecycle: its writers (lifecycle.ts) and the data planes' reports they apply (lifecycle-reports.ts).
  const lifecycle = LIFECYCLE;
  const others: string[] = [];
  for (const file of await sourceFiles()) {
    if (lifecycle.includes(file)) continue;
    for (const { target, names } of await importsOf(file)) {
      if (path.relative(SRC, target).startsWith('store') && writers.some((w) => new RegExp(`\\b${w}\\b`).test(names)))
        others.push(`${relative(file)} imports ${names.replace(/\s+/g, ' ')}`);
    }
  }
  assert.deepEqual(others, []);
  // And no module writes those columns by hand.
  const byHand: string[] = [];
  for (const file of await sourceFiles()) {
    if (path.relative(SRC, file).startsWith('store') || lifecycle.includes(file)) continue;
    const text = await fs.readFile(file, 'utf8');
    if (/updateTable\(\s*'(revisions|deployments)'\s*\)[\s\S]{0,200}?\bstatus\s*:/.test(text))
      byHand.push(relative(file));
    if (/update\s+(revisions|deployments)\s+set\s+[^;]*\bstatus\s*=/i.test(text)) byHand.push(relative(file));
  }
  assert.deepEqual(byHand, []);
});

test('who ends a deletion is decided by src/domain/deletion.ts alone', async () => {
  // The facts the decision rests on are gathered by the lifecycle's startDeletion only, and only the
  // lifecycle ends a deletion.
  // The lifecycle: its writers (lifecycle.ts) and the data planes' reports they apply (lifecycle-reports.ts).
  const lifecycle = LIFECYCLE;
  const facts = ['hasLocalResources', 'listenerHasBeenSeen', 'finishDeletion'];
  const gatherers: string[] = [];
  for (const file of await sourceFiles()) {
    if (lifecycle.includes(file)) continue;
    for (const { names } of await importsOf(file)) {
      const found = facts.filter((f) => new RegExp(`\\b${f}\\b`).test(names));
      if (found.length > 0) gatherers.push(`${relative(file)} imports ${found.join(', ')}`);
    }
  }
  assert.deepEqual(gatherers, [], 'a delete calls startDeletion (src/service/lifecycle.ts)');
  // A copy of the rule pairs "being deleted" with the data plane (its listener_id): only the rule's
  // module does, and the worker's claim, whose SQL test/store/work-leases.test.ts checks against it.
  const allowed = new Map([
    ['src/domain/deletion.ts', 'the rule'],
    ['src/store/work-leases.ts', 'its SQL form, tested against the rule'],
    ['src/service/listener-conditions.ts', 'a condition leaves a deployment being deleted alone; it ends nothing'],
  ]);
  const copies: string[] = [];
  const pairing =
    /(?:={2,3}|\bis\b|\s=)\s*'AWAITING_DELETE'[^;]{0,160}listener_id|listener_id[^;]{0,160}(?:={2,3}|\s=)\s*'AWAITING_DELETE'/;
  for (const file of await sourceFiles()) {
    if (allowed.has(relative(file))) continue;
    if (pairing.test(await fs.readFile(file, 'utf8'))) copies.push(relative(file));
  }
  assert.deepEqual(
    copies,
    [],
    'who ends a deletion is pendingDeletionFinisher/deletionFinisher of src/domain/deletion.ts',
  );
});

test('the own data plane reports facts through the contract: no dataplane/ module writes events', async () => {
  // Events are the lifecycle's to write (DataPlaneReports.reportFact of src/domain/data-plane.ts).
  const writers: string[] = [];
  for (const file of await sourceFiles()) {
    if (area(file) !== 'dataplane') continue;
    for (const { target, names } of await importsOf(file)) {
      if (path.relative(SRC, target).startsWith(path.join('store', 'events')) && /\brecordEvents\b/.test(names))
        writers.push(`${relative(file)} imports recordEvents`);
    }
    if (/\binsertInto\(\s*'events'\s*\)|insert\s+into\s+events\b/i.test(await fs.readFile(file, 'utf8')))
      writers.push(`${relative(file)} inserts events`);
  }
  assert.deepEqual(writers, [], 'report it: DataPlaneReports.reportFact (src/domain/data-plane.ts)');
});

test("the own data plane writes none of the service's rows but its leases", async () => {
  // A store function that writes: its name says so, or its body inserts, updates or deletes rows. The
  // lease module's claims and leases are the data plane's own; every other write is reported through
  // the contract.
  const writer = /^(save|insert|record|update|delete|set|change|move|mark|append|trim|upsert|remove|claim)[A-Z]/;
  const writesRows =
    /\b(insertInto|updateTable|deleteFrom|mergeInto)\(|\b(insert\s+into|update\s+\w+\s+set|delete\s+from)\s/i;
  const writes: string[] = [];
  for (const file of await sourceFiles()) {
    if (area(file) !== 'dataplane') continue;
    if (writesRows.test(await fs.readFile(file, 'utf8'))) writes.push(`${relative(file)} writes rows itself`);
    for (const { target, names } of await importsOf(file)) {
      const store = path.relative(SRC, target);
      if (!store.startsWith('store') || store.startsWith(path.join('store', 'work-leases'))) continue;
      const text = await fs.readFile(target, 'utf8');
      for (const name of names.replace(/[{}]/g, ' ').split(/[\s,]+/)) {
        if (name === '' || name === 'type') continue;
        // The exported function's text, up to the next top-level declaration.
        const start = text.search(new RegExp(`^export (async )?function\\*? ?${name}\\b`, 'm'));
        const rest = start === -1 ? '' : text.slice(start + 1);
        const end = rest.search(/^(export |function |async function |const |class )/m);
        const body = end === -1 ? rest : rest.slice(0, end);
        if (writer.test(name) || writesRows.test(body)) writes.push(`${relative(file)} imports ${name}`);
      }
    }
  }
  assert.deepEqual(writes, [], 'report it through DataPlaneReports (src/domain/data-plane.ts)');
});

test('which revision should run is decided by src/domain/desired-state.ts alone', async () => {
  // A copy of the rule chooses between a deployment's latest and active revision, or names the final
  // statuses but DEPLOYED (those in which a revision must not run). The worker's claims are its SQL
  // form, which test/store/desired-state-claims.test.ts checks against it.
  const allowed = new Map([
    ['src/domain/desired-state.ts', 'the rule'],
    ['src/store/revision-logs.ts', "which revision's logs a deployment shows (active, else latest): not what runs"],
  ]);
  const choosing =
    /latest_revision_id[^;]{0,160}(?:\?\?|\|\||\?)[^;]{0,160}active_revision_id|active_revision_id[^;]{0,160}(?:\?\?|\|\||\?)[^;]{0,160}latest_revision_id/;
  const notToRun =
    /isFinalRevisionStatus\([^;]{0,120}!==?\s*'DEPLOYED'|!==?\s*'DEPLOYED'[^;]{0,120}isFinalRevisionStatus\(/;
  const copies: string[] = [];
  for (const file of await sourceFiles()) {
    if (allowed.has(relative(file))) continue;
    const text = await fs.readFile(file, 'utf8');
    if (choosing.test(text)) copies.push(`${relative(file)} chooses between the latest and the active revision`);
    if (notToRun.test(text)) copies.push(`${relative(file)} names the final statuses but DEPLOYED`);
  }
  assert.deepEqual(
    copies,
    [],
    'what should run is targetRevisionId/desiredDeploymentState of src/domain/desired-state.ts',
  );
  // The listener protocol serves the rule's answer.
  const protocol = await fs.readFile(path.join(SRC, 'service', 'listener-protocol.ts'), 'utf8');
  assert.match(protocol, /\bdesiredDeploymentState\(/, 'the listener protocol serves desiredDeploymentState');
});
