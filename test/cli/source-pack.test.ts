/**
 * What `slipway deploy` uploads of a folder: what git would commit, minus .slipwayignore, never
 * node_modules or .git; read back from the tarball itself.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import * as tar from 'tar';
import { packSource } from '@slipway/cli/source-pack';
import { writeApp } from '../dataplane/data-plane-harness.ts';

test('a folder is packed as git would commit it, minus .slipwayignore, never node_modules or .git', async () => {
  const dir = await writeApp({
    'slipway.json': '{}',
    'server.js': '',
    '.gitignore': 'dist/\n*.log\n!keep.log\n.env\n',
    '.slipwayignore': 'docs/\n',
    '.env': 'SECRET=1\n',
    'debug.log': '',
    'keep.log': '',
    'dist/bundle.js': '',
    'docs/readme.md': '',
    'node_modules/left-pad/index.js': '',
    'lib/node_modules/x.js': '',
    '.git/HEAD': 'ref: refs/heads/main\n',
    'src/tool.js': '',
    'src/.gitignore': 'generated.js\n',
    'src/generated.js': '',
    'src/deep/generated.js': '',
  });
  const extracted = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-unpacked-'));
  try {
    const packed = await packSource(dir);
    const archive = path.join(extracted, 'source.tar.gz');
    await fs.writeFile(archive, packed.tarball);
    const entries: string[] = [];
    await tar.t({ file: archive, onReadEntry: (entry) => entries.push(entry.path) });
    const expected = [
      '.gitignore',
      '.slipwayignore',
      'keep.log',
      'server.js',
      'slipway.json',
      'src/.gitignore',
      'src/tool.js',
    ];
    assert.deepEqual(entries.sort(), expected);
    assert.deepEqual(packed.files, expected);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
    await fs.rm(extracted, { recursive: true, force: true });
  }
});
