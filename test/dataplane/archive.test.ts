import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
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
    if (entry.path.length > 99 || (entry.linkpath?.length ?? 0) > 99) {
      // Long paths go in a pax extended header, like GNU tar and GitHub write them.
      pax = new tar.Pax({
        path: entry.path,
        ...(entry.linkpath === undefined ? {} : { linkpath: entry.linkpath }),
      }).encode();
      data.path = entry.path.slice(0, 99);
      if (entry.linkpath !== undefined) data.linkpath = entry.linkpath.slice(0, 99);
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

const MiB = 1024 * 1024;
// One gzip member of 1 MiB of zeros (about 1 KB): concatenated members make one gzip stream, so a stream of
// hundreds of MiB costs a few hundred KB on disk and nothing to compress.
const ZERO_MIB_MEMBER = gzipSync(Buffer.alloc(MiB));

/** A gzipped stream: `parts` in order, each compressed on its own, then `zeroMiB` MiB of zeros. */
function gzipStream(parts: Buffer[], zeroMiB = 0): Buffer {
  return Buffer.concat([...parts.map((part) => gzipSync(part)), ...Array<Buffer>(zeroMiB).fill(ZERO_MIB_MEMBER)]);
}

/** The tar header of a regular file of `size` bytes. */
function fileHeader(name: string, size: number): Buffer {
  const header = Buffer.alloc(512);
  new tar.Header({ path: name, type: 'File', size, mode: 0o644, mtime: new Date('2026-01-01T00:00:00Z') }).encode(
    header,
    0,
  );
  return header;
}

/**
 * An archive of `first.txt` then `big.bin`, `bigMiB` MiB of zeros: its listing and its extraction each take
 * a while (hundreds of MiB to decompress, or to write), which is when the tests below interrupt them.
 */
function bigTarball(bigMiB: number): Buffer {
  const first = Buffer.from('first');
  return Buffer.concat([
    gzipStream(
      [
        fileHeader('first.txt', first.length),
        first,
        Buffer.alloc(512 - first.length),
        fileHeader('big.bin', bigMiB * MiB),
      ],
      bigMiB,
    ),
    gzipSync(Buffer.alloc(1024)),
  ]);
}

/** Whether the extraction's staging directory has appeared in the destination (the listing is over). */
async function stagingIn(dest: string): Promise<string | undefined> {
  const names = await fs.readdir(dest).catch(() => []);
  const staging = names.find((name) => name.startsWith('.slipway-extract-'));
  return staging === undefined ? undefined : path.join(dest, staging);
}

/** The refusal of an archive of `entries`, whatever its reason. */
async function refusedArchive(box: Sandbox, entries: RawEntry[]): Promise<ArchiveError> {
  await fs.writeFile(box.archive, rawTarball(entries));
  return refusal(box, () => extractTarball(box.archive, box.dest));
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

test('after the end of the archive, its record padding and a little more are ignored, whatever they hold', async () => {
  await withSandbox(async (box) => {
    const entries = [
      { path: 'a.txt', body: 'a' },
      { path: 'dir/b.txt', body: 'b'.repeat(700) },
    ];
    const plain = gunzipSync(rawTarball(entries));
    const hidden = gunzipSync(rawTarball([{ path: 'hidden.txt', body: 'after the end' }]));
    const cases: [string, Buffer][] = [
      ['padding to a 10240-byte record', Buffer.alloc(10240 - (plain.length % 10240))],
      ['64 KiB of zeros', Buffer.alloc(64 * 1024)],
      ['some text', Buffer.from('trailing garbage '.repeat(100))],
      ['an entry after the end', hidden],
    ];
    for (const [what, trailing] of cases) {
      await fs.rm(box.dest, { recursive: true, force: true });
      await fs.writeFile(box.archive, gzipSync(Buffer.concat([plain, trailing])));
      const result = await extractTarball(box.archive, box.dest);
      assert.deepEqual(result, { files: 2, bytes: 701 }, what);
      assert.deepEqual((await fs.readdir(box.dest, { recursive: true })).sort(), ['a.txt', 'dir', 'dir/b.txt'], what);
      assert.equal(await fs.readFile(path.join(box.dest, 'dir', 'b.txt'), 'utf8'), 'b'.repeat(700), what);
    }
  });
});

// Before the end of the archive was noticed, the parser kept every byte after it and copied all of them
// again at each chunk: 200 MiB of zeros (200 KB gzipped) kept a CPU busy for many minutes. The generous
// timeout only turns such a hang into a failure; nothing here measures time.
test(
  'more data after the end of the archive than the allowance is refused, the same for 2 MiB as for 200 MiB',
  { timeout: 120_000 },
  async () => {
    await withSandbox(async (box) => {
      const plain = gunzipSync(rawTarball([{ path: 'a.txt', body: 'a' }]));
      const outcomes: string[] = [];
      const cases: [string, Buffer][] = [
        ['2 MiB of zeros', gzipStream([plain], 2)],
        ['200 MiB of zeros', gzipStream([plain], 200)],
        ['2 MiB of text', gzipStream([plain, Buffer.alloc(2 * MiB, 'garbage ')])],
      ];
      for (const [what, bytes] of cases) {
        await fs.writeFile(box.archive, bytes);
        const error = await refusal(box, () => extractTarball(box.archive, box.dest));
        assert.equal(error.reason, 'invalid_archive', `${what}: ${error.message}`);
        assert.match(error.message, /after its end/, what);
        outcomes.push(`${error.reason}: ${error.message}`);
      }
      assert.equal(new Set(outcomes).size, 1, 'one answer, however much follows the end');
    });
  },
);

test('an already aborted signal does nothing at all', async () => {
  await withSandbox(async (box) => {
    const reason = new Error('the revision was interrupted');
    const controller = new AbortController();
    controller.abort(reason);
    // Not even the missing archive is noticed: nothing is looked at.
    await assert.rejects(
      extractTarball(path.join(box.root, 'missing.tar.gz'), box.dest, { signal: controller.signal }),
      (error) => error === reason,
    );
    await assert.rejects(fs.stat(box.dest), { code: 'ENOENT' }, 'the destination was not even created');
  });
});

test('an abort while the archive is listed stops the listing: the destination stays empty, the reason is thrown', async () => {
  await withSandbox(async (box) => {
    // 512 MiB to decompress before anything is written.
    await fs.writeFile(box.archive, bigTarball(512));
    const reason = new Error('the service is shutting down');
    const controller = new AbortController();
    const extraction = extractTarball(box.archive, box.dest, { signal: controller.signal });
    let settled = false;
    let sawStaging = false;
    const watching = (async () => {
      while (!settled) {
        if ((await stagingIn(box.dest)) !== undefined) sawStaging = true;
        await sleep(1);
      }
    })();
    setTimeout(() => controller.abort(reason), 20);
    const outcome = await extraction.then(
      () => 'extracted',
      (error: unknown) => error,
    );
    settled = true;
    await watching;
    assert.equal(outcome, reason, 'rejected with the reason');
    assert.equal(sawStaging, false, 'stopped while listing: extraction never began');
    assert.deepEqual(await fs.readdir(box.dest), [], 'the destination is left empty');
  });
});

test('an abort while the archive is extracted stops the extraction: the destination is left empty, the reason is thrown', async () => {
  await withSandbox(async (box) => {
    await fs.writeFile(box.archive, bigTarball(256));
    const reason = { why: 'interrupted' };
    const controller = new AbortController();
    const extraction = extractTarball(box.archive, box.dest, { signal: controller.signal });
    let settled = false;
    const outcome = extraction.then(
      () => 'extracted',
      (error: unknown) => error,
    );
    void outcome.finally(() => (settled = true));
    // The first file written in the staging directory: the extraction pass is under way.
    while (!settled) {
      const staging = await stagingIn(box.dest);
      if (staging !== undefined && (await fs.readdir(staging).catch((): string[] => [])).includes('first.txt')) break;
      await sleep(1);
    }
    controller.abort(reason);
    assert.equal(await outcome, reason, 'rejected with the reason');
    assert.deepEqual(await fs.readdir(box.dest), [], 'the destination is left empty');
    assert.deepEqual(await outsideState(box), ['outside dir', 'outside/sentinel.txt file 9', 'work dir']);
  });
});

test('an extraction that takes longer than its time bound is refused', async () => {
  await withSandbox(async (box) => {
    await fs.writeFile(box.archive, bigTarball(512));
    const error = await refusal(box, () => extractTarball(box.archive, box.dest, { timeoutMs: 5 }));
    assert.equal(error.reason, 'archive_too_slow');
    assert.match(error.message, /took more than 0\.005 s/);
  });
});

// Each path or link target was once walked prefix by prefix, building a string for each: quadratic in its
// depth, and synchronous, so that one entry with a 64 KiB path held the whole process for about a minute
// (a 1 MiB path, for hours). The timeouts only turn such a hang into a failure.
test(
  'paths and link targets too long for a file system are refused before they are judged',
  { timeout: 120_000 },
  async () => {
    await withSandbox(async (box) => {
      const deep = 'a/'.repeat(32 * 1024);
      const longPath = await refusedArchive(box, [{ path: `${deep}x.txt`, body: 'x' }]);
      assert.equal(longPath.reason, 'invalid_archive');
      assert.match(longPath.message, /more than 4095 bytes/);
      const longLink = await refusedArchive(box, [{ path: 'link', type: 'SymbolicLink', linkpath: deep }]);
      assert.equal(longLink.reason, 'invalid_archive');
      assert.match(longLink.message, /'link'.*more than 4095 bytes/);
    });
  },
);

test('many deep paths, or many deep link targets, are refused as they are listed', { timeout: 120_000 }, async () => {
  await withSandbox(async (box) => {
    // 2,000 components each (as deep as 4095 bytes allow), 2,000 times: over 32 per entry on average.
    const deep = 'a/'.repeat(2000);
    const paths = await refusedArchive(box, [
      { path: 'first.txt', body: 'first' },
      ...Array.from({ length: 2000 }, (_, i) => ({ path: `${deep}${i}`, body: 'x' })),
    ]);
    assert.equal(paths.reason, 'unsafe_archive');
    assert.match(paths.message, /more than 640000 components/);
    const links = await refusedArchive(
      box,
      Array.from({ length: 2000 }, (_, i) => ({
        path: `m${i}`,
        type: 'SymbolicLink',
        linkpath: 'c/'.repeat(2040) + String(i),
      })),
    );
    assert.equal(links.reason, 'unsafe_archive');
    assert.match(links.message, /more than 640000 components .* \(reached at 'm313'\)/);
  });
});

test('deep paths and chains of links within the limits are judged as Linux would resolve them', async () => {
  await withSandbox(async (box) => {
    // As deep as 4095 bytes allow, and as many as the limit on components lets through: the planning
    // takes them; the package then refuses to write deeper than 1024 directories.
    const deep = 'a/'.repeat(2000);
    await fs.writeFile(
      box.archive,
      rawTarball([
        { path: 'first.txt', body: 'first' },
        ...Array.from({ length: 300 }, (_, i) => ({ path: `${deep}${i}`, body: 'x' })),
      ]),
    );
    const error = await refusal(box, () => extractTarball(box.archive, box.dest));
    assert.equal(error.reason, 'invalid_archive');
    assert.match(error.message, /excessively deep/);

    // Links whose targets run through a chain of other links: fine up to 40 links followed, as on Linux.
    // Listed outermost first, since the package will not write a link through a link already written.
    await fs.rm(box.dest, { recursive: true, force: true });
    const chain = Array.from({ length: 42 }, (_, i) => ({
      path: `l${i}`,
      type: 'SymbolicLink' as const,
      linkpath: `${i === 0 ? 'real' : `l${i - 1}`}/${'sub/../'.repeat(500)}`,
    }));
    const real = [
      { path: 'real/sub', type: 'Directory' as const },
      { path: 'real/x.txt', body: 'x' },
    ];
    await fs.writeFile(box.archive, rawTarball([...real, ...chain.slice(0, 40).reverse()]));
    assert.equal((await extractTarball(box.archive, box.dest)).files, 1);
    assert.equal(await fs.readFile(path.join(box.dest, 'l39', 'x.txt'), 'utf8'), 'x', 'a chain of 40 links');
    await fs.rm(box.dest, { recursive: true, force: true });
    await unsafeArchive(box, [...real, ...chain.reverse()], 'l41');
  });
});
