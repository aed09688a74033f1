/**
 * What the data plane writes into a LangGraph revision's source at build time (src/dataplane/
 * app-config-file.ts): the launcher, .slipway/langgraph-server.mjs, and every module of its PostgreSQL
 * layer, .slipway/langgraph/*.mjs, byte for byte as the service ships them (runtime/). An archive that
 * brings its own .slipway/langgraph (a link out of the source, or files of its own) changes neither
 * what runs nor anything outside the source.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { loadAppConfig } from '../../src/dataplane/app-config-file.ts';

const RUNTIME = fileURLToPath(new URL('../../runtime/', import.meta.url));
const CONFIG = JSON.stringify({ node_version: '20', graphs: { agent: './agent.ts:graph' } });
const PKG = JSON.stringify({ name: 'agent', private: true });

let scratch: string;
before(async () => {
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-launcher-copy-'));
});
after(() => fs.rm(scratch, { recursive: true, force: true }));

let count = 0;
async function source(files: Record<string, string>): Promise<string> {
  const dir = path.join(scratch, `source-${++count}`);
  await fs.mkdir(dir, { recursive: true });
  for (const [name, content] of Object.entries(files)) {
    await fs.mkdir(path.dirname(path.join(dir, name)), { recursive: true });
    await fs.writeFile(path.join(dir, name), content);
  }
  return dir;
}

/** Every file under `dir`, relative, with its text. */
async function filesOf(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const entry of await fs.readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    const full = path.join(entry.parentPath, entry.name);
    out[path.relative(dir, full)] = await fs.readFile(full, 'utf8');
  }
  return out;
}

test('the launcher and every module of runtime/langgraph/ are written into .slipway/, as shipped', async () => {
  const dir = await source({ 'langgraph.json': CONFIG, 'package.json': PKG, 'agent.ts': '' });
  await loadAppConfig(dir, 'langgraph.json', {});
  const shipped = await filesOf(RUNTIME);
  assert.ok(Object.keys(shipped).includes(path.join('langgraph', 'serve.mjs')));
  assert.deepEqual(await filesOf(path.join(dir, '.slipway')), shipped);
});

test("an archive's .slipway/langgraph, a link out of the source or files of its own, is replaced, nothing outside touched", async () => {
  const outside = await source({ 'keep.txt': 'x', 'serve.mjs': 'the host file' });
  const linked = await source({ 'langgraph.json': CONFIG, 'package.json': PKG, 'agent.ts': '' });
  await fs.mkdir(path.join(linked, '.slipway'));
  await fs.symlink(outside, path.join(linked, '.slipway', 'langgraph'));
  await loadAppConfig(linked, 'langgraph.json', {});
  assert.deepEqual(await filesOf(outside), { 'keep.txt': 'x', 'serve.mjs': 'the host file' });
  assert.equal((await fs.lstat(path.join(linked, '.slipway', 'langgraph'))).isDirectory(), true);
  assert.deepEqual(await filesOf(path.join(linked, '.slipway')), await filesOf(RUNTIME));

  const planted = await source({
    'langgraph.json': CONFIG,
    'package.json': PKG,
    'agent.ts': '',
    '.slipway/langgraph/serve.mjs': "export async function serve() { /* the archive's own */ }",
    '.slipway/langgraph/extra.mjs': 'export {};',
  });
  await loadAppConfig(planted, 'langgraph.json', {});
  assert.deepEqual(await filesOf(path.join(planted, '.slipway')), await filesOf(RUNTIME));
});
