import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import * as tar from 'tar';
import { ArchiveError } from '../../src/dataplane/archive-error.ts';
import { extractTarball } from '../../src/dataplane/archive-extraction.ts';

/**
 * Each test works in its own directory:
 *
 *   <root>/archive.tar.gz     the archive under test
 *   <root>/outside/           what a hostile archive aims at; holds a sentinel file
 *   <root>/work/dest/         the destination
 *
 * and checks, besides the answer, that nothing under <root> outside the destination changed.
 */
interface Sandbox {
  root: string;
  archive: string;
  outside: string;
  dest: string;
}

async function withSandbox(run: (box: Sandbox) => Promise<void>): Promise<void> {
  const root = await fs.realpath(await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-archive-')));
  const box = {
    root,
    archive: path.join(root, 'archive.tar.gz'),
    outside: path.join(root, 'outside'),
    dest: path.join(root, 'work', 'dest'),
  };
  await fs.mkdir(box.outside);
  await fs.mkdir(path.dirname(box.dest));
  await fs.writeFile(path.join(box.outside, 'sentinel.txt'), 'untouched');
  try {
    await run(box);
  } finally {
    await fs.rm(root, { recursive: true, force: true });
  }
}

/** Every path under the sandbox but outside the destination, with what it is. */
async function outsideState(box: Sandbox): Promise<string[]> {
  const entries = await fs.readdir(box.root, { recursive: true, withFileTypes: true });
  const found: string[] = [];
  for (const entry of entries) {
    const full = path.join(entry.parentPath, entry.name);
    if (full === box.dest || full.startsWith(box.dest + path.sep) || full === box.archive) continue;
    const stat = await fs.lstat(full);
    found.push(
      `${path.relative(box.root, full)} ${stat.isSymbolicLink() ? 'link' : stat.isDirectory() ? 'dir' : `file ${stat.size}`}`,
    );
  }
  return found.sort();
}

interface RawEntry {
  path: string;
  type?: tar.HeaderData['type'];
  linkpath?: string;
  body?: string;
  mode?: number;
  uid?: number;
  gid?: number;
}

/** A gzipped tarball written header by header, for entries the `tar` package refuses to write. */
function rawTarball(entries: RawEntry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const entry of entries) {
    const body = Buffer.from(entry.body ?? '');
    const data: tar.HeaderData = {
      path: entry.path,
      type: entry.type ?? 'File',
      size: body.length,
      mode: entry.mode ?? 0o644,
      uid: entry.uid ?? 1000,
      gid: entry.gid ?? 1000,
      mtime: new Date('2026-01-01T00:00:00Z'),
      ...(entry.linkpath === undefined ? {} : { linkpath: entry.linkpath }),
    };
    let pax: Buffer | undefined;
    if (entry.path.length > 99) {
      // Long paths go in a pax extended header, like GNU tar and GitHub write them.
      pax = new tar.Pax({ path: entry.path }).encode();
      data.path = entry.path.slice(0, 99);
    }
    const header = Buffer.alloc(512);
    new tar.Header(data).encode(header, 0);
    if (pax !== undefined) blocks.push(pax);
    blocks.push(header, body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return gzipSync(Buffer.concat(blocks));
}

async function refusal(box: Sandbox, run: () => Promise<unknown>): Promise<ArchiveError> {
  const before = await outsideState(box);
  let caught: unknown;
  try {
    await run();
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ArchiveError, `expected an ArchiveError, got ${String(caught)}`);
  assert.deepEqual(await outsideState(box), before, 'nothing outside the destination changed');
  assert.equal(await fs.readFile(path.join(box.outside, 'sentinel.txt'), 'utf8'), 'untouched');
  const left = await fs.readdir(box.dest).catch(() => []);
  assert.deepEqual(left, [], 'the destination is left empty');
  return caught;
}

async function unsafeArchive(box: Sandbox, entries: RawEntry[], offending: string): Promise<ArchiveError> {
  await fs.writeFile(box.archive, rawTarball(entries));
  const error = await refusal(box, () => extractTarball(box.archive, box.dest));
  assert.equal(error.reason, 'unsafe_archive');
  assert.ok(error.message.includes(`'${offending}'`), `the message names '${offending}': ${error.message}`);
  return error;
}

/** A small project `app/` on disk, archived with the `tar` package as `tar czf app.tgz app/` would. */
async function projectTarball(box: Sandbox): Promise<void> {
  const project = path.join(box.root, 'project');
  await fs.mkdir(path.join(project, 'app', 'src', 'lib'), { recursive: true });
  await fs.mkdir(path.join(project, 'app', 'empty'));
  await fs.writeFile(path.join(project, 'app', 'package.json'), '{"name":"agent"}');
  await fs.writeFile(path.join(project, 'app', 'src', 'index.js'), 'console.log("hi")\n');
  await fs.writeFile(path.join(project, 'app', 'src', 'lib', 'util.js'), 'export const x = 1;\n');
  await fs.writeFile(path.join(project, 'app', 'run.sh'), '#!/bin/sh\necho run\n', { mode: 0o755 });
  await fs.symlink('src/lib', path.join(project, 'app', 'lib'));
  await fs.symlink('../package.json', path.join(project, 'app', 'src', 'package.json'));
  await tar.create({ gzip: true, file: box.archive, cwd: project, portable: true }, ['app']);
  await fs.rm(project, { recursive: true });
}

test('a project tarball is extracted with its files, modes and links inside, its top directory dropped', async () => {
  await withSandbox(async (box) => {
    await projectTarball(box);
    const result = await extractTarball(box.archive, box.dest, { stripSingleTopDirectory: true });

    assert.deepEqual((await fs.readdir(box.dest)).sort(), ['empty', 'lib', 'package.json', 'run.sh', 'src']);
    assert.equal(await fs.readFile(path.join(box.dest, 'package.json'), 'utf8'), '{"name":"agent"}');
    assert.equal(
      await fs.readFile(path.join(box.dest, 'lib', 'util.js'), 'utf8'),
      'export const x = 1;\n',
      'the link inside the tree works',
    );
    assert.equal(await fs.readlink(path.join(box.dest, 'lib')), 'src/lib');
    assert.equal(await fs.readFile(path.join(box.dest, 'src', 'package.json'), 'utf8'), '{"name":"agent"}');
    assert.equal((await fs.stat(path.join(box.dest, 'run.sh'))).mode & 0o777, 0o755);
    assert.equal(
      (await fs.stat(path.join(box.dest, 'src', 'index.js'))).mode & 0o700,
      0o600,
      'readable and writable by the owner',
    );
    const contents = ['{"name":"agent"}', 'console.log("hi")\n', 'export const x = 1;\n', '#!/bin/sh\necho run\n'];
    assert.deepEqual(result, { files: 4, bytes: contents.reduce((sum, text) => sum + Buffer.byteLength(text), 0) });
  });
});

test('without stripping, the top directory stays', async () => {
  await withSandbox(async (box) => {
    await projectTarball(box);
    await extractTarball(box.archive, box.dest);
    assert.deepEqual(await fs.readdir(box.dest), ['app']);
    assert.equal(await fs.readFile(path.join(box.dest, 'app', 'src', 'index.js'), 'utf8'), 'console.log("hi")\n');
  });
});

test('stripping leaves an archive alone when its entries do not share one top directory', async () => {
  await withSandbox(async (box) => {
    await fs.writeFile(
      box.archive,
      rawTarball([
        { path: 'app/index.js', body: 'a' },
        { path: 'README.md', body: 'b' },
      ]),
    );
    await extractTarball(box.archive, box.dest, { stripSingleTopDirectory: true });
    assert.deepEqual((await fs.readdir(box.dest)).sort(), ['README.md', 'app']);

    // A single top-level *file* is not a directory to strip either.
    await fs.rm(box.dest, { recursive: true });
    await fs.writeFile(box.archive, rawTarball([{ path: './agent.py', body: 'print(1)' }]));
    await extractTarball(box.archive, box.dest, { stripSingleTopDirectory: true });
    assert.deepEqual(await fs.readdir(box.dest), ['agent.py']);
  });
});

test('a GitHub tarball (a pax global header, entries under owner-repo-sha/) comes out without its prefix', async () => {
  await withSandbox(async (box) => {
    const sha = 'a'.repeat(40);
    const globalHeader = new tar.Pax({ comment: sha }, true).encode();
    const entries = rawTarball([
      { path: 'octo-org-agent-aaaaaaa/', type: 'Directory', mode: 0o775 },
      { path: 'octo-org-agent-aaaaaaa/slipway.json', body: '{}' },
      { path: 'octo-org-agent-aaaaaaa/big.bin', body: 'z'.repeat(3 * 1024 * 1024) },
    ]);
    await fs.writeFile(box.archive, gzipSync(Buffer.concat([globalHeader, gunzipSync(entries)])));
    const result = await extractTarball(box.archive, box.dest, { stripSingleTopDirectory: true });
    assert.deepEqual((await fs.readdir(box.dest)).sort(), ['big.bin', 'slipway.json']);
    assert.equal((await fs.stat(path.join(box.dest, 'big.bin'))).size, 3 * 1024 * 1024);
    assert.deepEqual(result, { files: 2, bytes: 2 + 3 * 1024 * 1024 });
  });
});

test("extracted files keep neither setuid/setgid bits nor the archive's owner", async () => {
  await withSandbox(async (box) => {
    await fs.writeFile(
      box.archive,
      rawTarball([
        { path: 'bin/tool', body: '#!/bin/sh\n', mode: 0o6777, uid: 4321, gid: 4321 },
        { path: 'secret', body: 'x', mode: 0o000 },
        { path: 'shared', type: 'Directory', mode: 0o1777 },
      ]),
    );
    await extractTarball(box.archive, box.dest);
    const tool = await fs.stat(path.join(box.dest, 'bin', 'tool'));
    assert.equal(tool.mode & 0o7000, 0, 'no setuid, setgid or sticky bit');
    assert.equal(tool.mode & 0o002, 0, 'not writable by others');
    assert.equal(tool.uid, process.getuid?.());
    assert.equal(tool.gid, process.getgid?.());
    assert.equal((await fs.stat(path.join(box.dest, 'secret'))).mode & 0o400, 0o400, 'readable by the owner');
    assert.equal((await fs.stat(path.join(box.dest, 'shared'))).mode & 0o7777, 0o755);
  });
});

test('an entry with .. is refused, naming it', async () => {
  await withSandbox(async (box) => {
    const error = await unsafeArchive(
      box,
      [
        { path: 'ok.txt', body: 'fine' },
        { path: '../../outside/pwned', body: 'evil' },
      ],
      '../../outside/pwned',
    );
    assert.equal(
      error.message,
      "The archive entry '../../outside/pwned' points outside the source directory; archives must hold relative paths only.",
    );
    await unsafeArchive(box, [{ path: 'a/../../../outside/pwned2', body: 'evil' }], 'a/../../../outside/pwned2');
  });
});

test('an absolute entry path is refused', async () => {
  await withSandbox(async (box) => {
    const target = path.join(box.outside, 'abs-pwned');
    const error = await unsafeArchive(box, [{ path: target, body: 'evil' }], target);
    assert.match(error.message, /absolute path/);
  });
});

test('a symbolic link pointing outside is refused, relative or absolute', async () => {
  await withSandbox(async (box) => {
    await unsafeArchive(box, [{ path: 'escape', type: 'SymbolicLink', linkpath: '../../outside' }], 'escape');
    await unsafeArchive(
      box,
      [{ path: 'sub/escape', type: 'SymbolicLink', linkpath: '../../../outside/sentinel.txt' }],
      'sub/escape',
    );
    const absolute = await unsafeArchive(box, [{ path: 'etc', type: 'SymbolicLink', linkpath: box.outside }], 'etc');
    assert.match(absolute.message, /absolute path/);
  });
});

test('a file written through a symbolic link of the archive is refused, before anything is written', async () => {
  await withSandbox(async (box) => {
    // The link alone points outside; the file after it would land there.
    await unsafeArchive(
      box,
      [
        { path: 'out', type: 'SymbolicLink', linkpath: '../../outside' },
        { path: 'out/pwned', body: 'evil' },
      ],
      'out',
    );
    // Even a link that stays inside may not be written through: where the file lands would depend on it.
    const error = await unsafeArchive(
      box,
      [
        { path: 'real/keep.txt', body: 'keep' },
        { path: 'alias', type: 'SymbolicLink', linkpath: 'real' },
        { path: 'alias/new.txt', body: 'through' },
      ],
      'alias/new.txt',
    );
    assert.match(error.message, /through the symbolic link 'alias'/);
  });
});

test('a link whose target runs through another link to outside is refused, whatever their order', async () => {
  await withSandbox(async (box) => {
    // Read lexically, `z` stays inside (a/b/c/../../y is a/y); on disk a/b/c is the root, so it is ../y.
    await unsafeArchive(
      box,
      [
        { path: 'z', type: 'SymbolicLink', linkpath: 'a/b/c/../../outside' },
        { path: 'a/b/c', type: 'SymbolicLink', linkpath: '../..' },
      ],
      'z',
    );
  });
});

test('a link replacing an entry, or an entry replacing a link, is refused', async () => {
  await withSandbox(async (box) => {
    await unsafeArchive(
      box,
      [
        { path: 'config', body: 'a' },
        { path: 'config', type: 'SymbolicLink', linkpath: 'other' },
      ],
      'config',
    );
  });
});

test('hard links must join files of the archive', async () => {
  await withSandbox(async (box) => {
    const outside = await unsafeArchive(
      box,
      [{ path: 'passwd', type: 'Link', linkpath: '../../outside/sentinel.txt' }],
      'passwd',
    );
    assert.match(outside.message, /hard link/);
    await unsafeArchive(
      box,
      [{ path: 'passwd', type: 'Link', linkpath: path.join(box.outside, 'sentinel.txt') }],
      'passwd',
    );
    await unsafeArchive(box, [{ path: 'dangling', type: 'Link', linkpath: 'not-there' }], 'dangling');

    await fs.writeFile(
      box.archive,
      rawTarball([
        { path: 'a.txt', body: 'same' },
        { path: 'b.txt', type: 'Link', linkpath: 'a.txt' },
      ]),
    );
    const result = await extractTarball(box.archive, box.dest);
    assert.equal(await fs.readFile(path.join(box.dest, 'b.txt'), 'utf8'), 'same');
    assert.equal(result.files, 2);
  });
});

test('hard links are rewritten along with the stripped top directory', async () => {
  await withSandbox(async (box) => {
    await fs.writeFile(
      box.archive,
      rawTarball([
        { path: 'repo-abc/a.txt', body: 'same' },
        { path: 'repo-abc/docs/b.txt', type: 'Link', linkpath: 'repo-abc/a.txt' },
      ]),
    );
    await extractTarball(box.archive, box.dest, { stripSingleTopDirectory: true });
    assert.equal(await fs.readFile(path.join(box.dest, 'docs', 'b.txt'), 'utf8'), 'same');
  });
});

for (const [type, described] of [
  ['CharacterDevice', 'character device'],
  ['BlockDevice', 'block device'],
  ['FIFO', 'named pipe'],
] as const) {
  test(`a ${described} entry is refused`, async () => {
    await withSandbox(async (box) => {
      const error = await unsafeArchive(
        box,
        [
          { path: 'ok.txt', body: 'fine' },
          { path: 'dev/thing', type },
        ],
        'dev/thing',
      );
      assert.match(error.message, new RegExp(described));
    });
  });
}

test('more entries than allowed are refused', async () => {
  await withSandbox(async (box) => {
    const entries = Array.from({ length: 6 }, (_, i) => ({ path: `f${i}.txt`, body: 'x' }));
    await fs.writeFile(box.archive, rawTarball(entries));
    const error = await refusal(box, () => extractTarball(box.archive, box.dest, { maxFiles: 5 }));
    assert.equal(error.reason, 'unsafe_archive');
    assert.match(error.message, /more than 5 entries/);

    await fs.rm(box.dest, { recursive: true });
    assert.equal((await extractTarball(box.archive, box.dest, { maxFiles: 6 })).files, 6);
  });
});

test('more bytes than allowed are refused, by the sizes the entries declare', async () => {
  await withSandbox(async (box) => {
    await fs.writeFile(
      box.archive,
      rawTarball([
        { path: 'a.bin', body: 'a'.repeat(600) },
        { path: 'b.bin', body: 'b'.repeat(600) },
      ]),
    );
    const error = await refusal(box, () => extractTarball(box.archive, box.dest, { maxBytes: 1000 }));
    assert.equal(error.reason, 'unsafe_archive');
    assert.match(error.message, /more than 1000 bytes/);
    assert.ok(error.message.includes("'b.bin'"));
  });
});

test('a file that is not a gzipped tar, or a damaged one, is an invalid archive', async () => {
  await withSandbox(async (box) => {
    const good = rawTarball([
      { path: 'a.txt', body: 'x'.repeat(5000) },
      { path: 'b.txt', body: 'y'.repeat(5000) },
    ]);
    const cases: [string, Buffer][] = [
      ['plain text', Buffer.from('this is not an archive')],
      ['an uncompressed tar', gunzipSync(good)],
      ['gzip magic and garbage', Buffer.concat([Buffer.from([0x1f, 0x8b]), Buffer.from('garbage garbage garbage')])],
      ['a truncated gzip', good.subarray(0, Math.floor(good.length / 2))],
      ['gzipped text that is not tar', gzipSync(Buffer.from('hello '.repeat(200)))],
      ['an empty file', Buffer.alloc(0)],
    ];
    for (const [what, bytes] of cases) {
      await fs.writeFile(box.archive, bytes);
      const error = await refusal(box, () => extractTarball(box.archive, box.dest));
      assert.equal(error.reason, 'invalid_archive', `${what}: ${error.message}`);
    }
  });
});

test('a tar header with a bad checksum is an invalid archive', async () => {
  await withSandbox(async (box) => {
    const plain = gunzipSync(rawTarball([{ path: 'a.txt', body: 'hello' }]));
    plain[0] = 'b'.charCodeAt(0); // the name changes, the checksum does not
    await fs.writeFile(box.archive, gzipSync(plain));
    const error = await refusal(box, () => extractTarball(box.archive, box.dest));
    assert.equal(error.reason, 'invalid_archive');
  });
});

test('a failure in the middle of extraction leaves the destination empty', async () => {
  await withSandbox(async (box) => {
    // The package refuses paths deeper than 1024 directories while extracting, after the first file is written.
    const deep = `${Array.from({ length: 1100 }, () => 'd').join('/')}/file.txt`;
    await fs.writeFile(
      box.archive,
      rawTarball([
        { path: 'first.txt', body: 'written first' },
        { path: 'second/x.txt', body: 'x' },
        { path: deep, body: 'deep' },
      ]),
    );
    const error = await refusal(box, () => extractTarball(box.archive, box.dest));
    assert.equal(error.reason, 'invalid_archive');
  });
});

test('the destination must be empty, and is created when missing', async () => {
  await withSandbox(async (box) => {
    await fs.writeFile(box.archive, rawTarball([{ path: 'a.txt', body: 'a' }]));
    await extractTarball(box.archive, box.dest);
    await assert.rejects(extractTarball(box.archive, box.dest), /not empty/);
    assert.deepEqual(await fs.readdir(box.dest), ['a.txt']);
  });
});
