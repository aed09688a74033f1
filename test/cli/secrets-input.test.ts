/**
 * `--secrets-file`: the dotenv dialect docs/cli.md promises (comments, `export`, quotes, escapes,
 * multi-line values such as PEM keys, Windows line ends), and a bad line named by file and line number
 * with exit code 2, before anything is uploaded.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { parseDotenv, readSecrets } from '@slipway/cli/secrets-input';

const PEM = [
  '-----BEGIN PRIVATE KEY-----',
  'MIIBVQIBADANBgkqhkiG9w0BAQEFAASC',
  '  indented line',
  '-----END PRIVATE KEY-----',
];

test('the dotenv dialect: comments, export, quotes, escapes, multi-line values', () => {
  const file = [
    '# a comment line, and a blank one',
    '',
    'export OPENAI_API_KEY=sk-123 # an inline comment after a space',
    'URL=https://example.com/a#fragment',
    'SPACED = around the equals sign   ',
    'SINGLE=\'kept as is: \\n "x" # not a comment\'',
    'DOUBLE="tab\\there, newline\\nthere, quote \\" and backslash \\\\" # comment',
    'EMPTY=',
    'EMPTY_QUOTED=""',
    `PRIVATE_KEY="${PEM[0]}`,
    ...PEM.slice(1, -1),
    `${PEM.at(-1)}"`,
    'AFTER=still read',
  ].join('\r\n');
  assert.deepEqual(parseDotenv(file, '.env'), [
    { name: 'OPENAI_API_KEY', value: 'sk-123' },
    { name: 'URL', value: 'https://example.com/a#fragment' },
    { name: 'SPACED', value: 'around the equals sign' },
    { name: 'SINGLE', value: 'kept as is: \\n "x" # not a comment' },
    { name: 'DOUBLE', value: 'tab\there, newline\nthere, quote " and backslash \\' },
    { name: 'EMPTY', value: '' },
    { name: 'EMPTY_QUOTED', value: '' },
    { name: 'PRIVATE_KEY', value: PEM.join('\n') },
    { name: 'AFTER', value: 'still read' },
  ]);
});

test('a bad line is named by file and line, with exit code 2', () => {
  const cases: [string, RegExp][] = [
    ['OK=1\nJUST_A_NAME', /^prod\.env:2: expected NAME=VALUE$/],
    ['1ABC=x', /^prod\.env:1: 1ABC is not a valid secret name/],
    ['MY-KEY=x', /^prod\.env:1: MY-KEY is not a valid secret name/],
    ['OK=1\nKEY="never closed\nOTHER=2', /^prod\.env:2: the quoted value of KEY is never closed$/],
    ['KEY="escaped at the end\\"', /^prod\.env:1: the quoted value of KEY is never closed$/],
    ["KEY='open", /^prod\.env:1: the quoted value of KEY is never closed$/],
    ['KEY="closed" too early\nOTHER="x"', /^prod\.env:1: unexpected text after the quoted value of KEY: too early$/],
    ["KEY='a' b", /^prod\.env:1: unexpected text after the quoted value of KEY: b$/],
  ];
  for (const [text, message] of cases) {
    assert.throws(() => parseDotenv(text, 'prod.env'), { message, exitCode: 2 }, JSON.stringify(text));
  }
});

test('readSecrets: a --secret wins over the file for the same name; a missing file is named', async () => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'slipway-secrets-'));
  try {
    const file = path.join(dir, '.env');
    await fs.writeFile(file, 'A=from-file\nB=from-file\n');
    assert.deepEqual(await readSecrets(['B=from-flag', 'C=flag-only'], file), [
      { name: 'A', value: 'from-file' },
      { name: 'B', value: 'from-flag' },
      { name: 'C', value: 'flag-only' },
    ]);
    await assert.rejects(readSecrets([], path.join(dir, 'missing.env')), {
      message: `--secrets-file ${path.join(dir, 'missing.env')}: no such file`,
      exitCode: 2,
    });
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});
