/**
 * The event registry (src/domain/event-types.ts) and what depends on it stay in step: docs/events.md
 * lists exactly the registered types, each type is written somewhere in the service's code (a type
 * nobody writes is a dead promise to readers of the event log), and the dashboard's activity list has
 * words for every type a deployment's event list can hold.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { EVENT_TYPES, type EventType } from '../../src/domain/event-types.ts';

const ROOT = path.resolve(import.meta.dirname, '..', '..');
const REGISTERED = Object.keys(EVENT_TYPES) as EventType[];

const read = (...parts: string[]) => fs.readFile(path.join(ROOT, ...parts), 'utf8');

test('every registered type has a one-line meaning, and its subject names it', () => {
  for (const [type, { summary }] of Object.entries(EVENT_TYPES)) {
    assert.match(type, /^[a-z_]+\.[a-z_]+$/, `${type} is <subject>.<what happened>`);
    assert.ok(summary.length > 15 && !summary.includes('\n'), `${type} has a one-line meaning`);
  }
});

test('docs/events.md lists every registered type with a meaning, and no other', async () => {
  const text = await read('docs', 'events.md');
  const documented = [...text.matchAll(/^\|\s*`([a-z_]+\.[a-z_]+)`\s*\|\s*(.+?)\s*\|\s*$/gm)];
  for (const [, type, meaning] of documented) assert.ok(meaning!.length > 15, `${type} has a meaning in the docs`);
  const names = documented.map((m) => m[1]!);
  assert.deepEqual(
    REGISTERED.filter((type) => !names.includes(type)),
    [],
    'every registered type is in docs/events.md',
  );
  assert.deepEqual(
    names.filter((type) => !(type in EVENT_TYPES)),
    [],
    'docs/events.md lists no type that is not registered',
  );
  assert.equal(new Set(names).size, names.length, 'docs/events.md lists each type once');
  assert.match(await read('docs', 'lifecycle.md'), /\(events\.md\)/, 'docs/lifecycle.md links docs/events.md');
});

test('every registered type is written somewhere in the service', async () => {
  // The service's code: not the registry itself, nor the clients (the SDK and the CLI only read events).
  const skipped = [path.join('src', 'domain', 'event-types.ts'), path.join('src', 'cli'), path.join('src', 'client')];
  const entries = await fs.readdir(path.join(ROOT, 'src'), { withFileTypes: true, recursive: true });
  const files = entries
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => path.relative(ROOT, path.join(e.parentPath, e.name)))
    .filter((file) => !skipped.some((skip) => file === skip || file.startsWith(skip + path.sep)));
  const sources = await Promise.all(files.map((file) => read(file)));
  const code = sources.join('\n');
  assert.deepEqual(
    REGISTERED.filter((type) => !code.includes(`'${type}'`)),
    [],
    'every registered type appears as a literal in src/ (else nothing writes it)',
  );
});

test("the dashboard's activity list has words for every type of a deployment's events", async () => {
  const text = await read('web', 'src', 'components', 'deployment-activity.tsx');
  const cases = [...text.matchAll(/^\s*case '([a-z_.]+)':/gm)].map((m) => m[1]!);
  // GET /v2/deployments/{id}/events answers the deployment's events and its revisions'.
  const shown = REGISTERED.filter((type) => type.startsWith('deployment.') || type.startsWith('revision.'));
  assert.deepEqual(
    shown.filter((type) => !cases.includes(type)),
    [],
    'describeEvent has a case for each deployment and revision event type',
  );
  assert.deepEqual(
    cases.filter((type) => !(type in EVENT_TYPES)),
    [],
    'describeEvent has no case for a type that is not registered',
  );
});
