/**
 * `node --import tsx bench/archive-extraction.ts`: how long src/dataplane/archive-extraction.ts takes on
 * hostile archives, each as small as gzip makes it, at the limits of what it accepts. A report, not a test
 * (test/dataplane/archive.test.ts checks the behaviour): each line says what the archive holds, how big the
 * file is, the outcome and the wall time.
 *
 * - trailing zeros: a one-file archive followed by N MiB of zeros. Before the extraction stopped at the end
 *   of the archive, the time grew with the square of N (5, 10, 20 MiB: 0.55, 2.9, 11.2 s).
 * - deep paths, deep links: as many entries as the limit on path components (32 per entry on average) lets
 *   through, at a given depth. The planning is linear; the `tar` package's own work per entry is not (its
 *   path reservations join each prefix of a path anew: depth × length), so these take seconds to a minute
 *   or more, which is what the time bound (`timeoutMs`, 2 minutes) is for. Run without it here.
 * - link chains: links through links, 40 followed at most, nearly 20,000 of them in reverse order.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import * as tar from 'tar';
import { extractTarball } from '../src/dataplane/archive-extraction.ts';

const MiB = 1024 * 1024;

function header(name: string, type: tar.HeaderData['type'], size: number, linkpath?: string): Buffer {
  const blocks: Buffer[] = [];
  const data: tar.HeaderData = { path: name, type, size, mode: 0o644, mtime: new Date(0) };
  if (linkpath !== undefined) data.linkpath = linkpath;
  if (name.length > 99 || (linkpath?.length ?? 0) > 99) {
    blocks.push(new tar.Pax({ path: name, ...(linkpath === undefined ? {} : { linkpath }) }).encode());
    data.path = name.slice(0, 99);
    if (linkpath !== undefined) data.linkpath = linkpath.slice(0, 99);
  }
  const block = Buffer.alloc(512);
  new tar.Header(data).encode(block, 0);
  blocks.push(block);
  return Buffer.concat(blocks);
}

const file = (name: string, body: string): Buffer =>
  Buffer.concat([
    header(name, 'File', body.length),
    Buffer.from(body),
    Buffer.alloc((512 - (body.length % 512)) % 512),
  ]);
const END = Buffer.alloc(1024);

const cases: [string, () => Buffer][] = [
  ...[5, 10, 20, 200].map((mib): [string, () => Buffer] => [
    `trailing zeros, ${mib} MiB`,
    () => {
      const member = gzipSync(Buffer.alloc(MiB));
      return Buffer.concat([gzipSync(Buffer.concat([file('a.txt', 'a'), END])), ...Array<Buffer>(mib).fill(member)]);
    },
  ]),
  ...[64, 256].map((depth): [string, () => Buffer] => {
    const count = Math.floor(640_000 / (depth + 1)) - 1;
    return [
      `deep paths, ${count} files ${depth} deep`,
      () =>
        gzipSync(
          Buffer.concat([...Array.from({ length: count }, (_, i) => file(`${'d/'.repeat(depth - 1)}${i}`, 'x')), END]),
        ),
    ];
  }),
  [
    'deep links, 2,489 links to 256 components',
    () =>
      gzipSync(
        Buffer.concat([
          ...Array.from({ length: 2489 }, (_, i) => header(`l${i}`, 'SymbolicLink', 0, `${'c/'.repeat(255)}${i}`)),
          END,
        ]),
      ),
  ],
  [
    'link chains, 19,999 links in reverse order',
    () =>
      gzipSync(
        Buffer.concat([
          header('real', 'Directory', 0),
          ...Array.from({ length: 19_999 }, (_, k) => {
            const i = 19_998 - k;
            return header(`l${i}`, 'SymbolicLink', 0, i % 40 === 0 ? 'real' : `l${i - 1}`);
          }),
          END,
        ]),
      ),
  ],
];

const root = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-archive-bench-'));
try {
  for (const [what, make] of cases) {
    const archive = path.join(root, 'archive.tar.gz');
    const dest = path.join(root, 'dest');
    const bytes = make();
    await fs.writeFile(archive, bytes);
    const started = performance.now();
    let outcome: string;
    try {
      const result = await extractTarball(archive, dest, { timeoutMs: Infinity });
      outcome = `extracted ${result.files} files`;
    } catch (error) {
      outcome = error instanceof Error ? `${error.name}: ${error.message.slice(0, 90)}` : String(error);
    }
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    process.stdout.write(
      `${what.padEnd(44)} ${String(bytes.length).padStart(9)} B  ${seconds.padStart(6)} s  ${outcome}\n`,
    );
    await fs.rm(dest, { recursive: true, force: true });
  }
} finally {
  await fs.rm(root, { recursive: true, force: true });
}
