/**
 * Endpoint names and the host labels they make (src/domain/endpoints.ts): no endpoint's host can be read
 * as a deployment's slug or as another endpoint's, and the built-in edge reads both back from a Host.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { endpointLabel, endpointNameProblem, endpointOfLabel } from '../../src/domain/endpoints.ts';
import { isAppSlug, slugFromHost } from '../../src/dataplane/app-urls.ts';

const SLUG = 'support-agent-0b9e1c2d';

test('ordinary names are taken and make <slug>--<name>', () => {
  for (const name of ['production', 'staging', 'pr-42', 'v2', 'deadbeef', 'a', '0123456789abcdef'])
    assert.equal(endpointNameProblem(name, SLUG), null, name);
  assert.equal(endpointLabel(SLUG, 'staging'), 'support-agent-0b9e1c2d--staging');
});

test('names that could make a host collide, or are not DNS-safe, are refused with a reason', () => {
  const refused = [
    'a--b',
    'Production',
    'prod\u00f6',
    '-a',
    'a-',
    '',
    'a.b',
    'x-0b9e1c2d',
    'x-0b9e1c2d5d2a4f1e',
    'x'.repeat(63 - SLUG.length - 1),
  ];
  for (const name of refused) assert.notEqual(endpointNameProblem(name, SLUG), null, JSON.stringify(name));
  assert.equal(endpointNameProblem('x'.repeat(63 - SLUG.length - 2), SLUG), null);
});

test('an accepted name never makes a label that reads as a slug, and a label reads back one way', () => {
  // Every short name over a small alphabet that holds hex digits and dashes.
  const alphabet = ['0', 'a', 'f', 'g', '-'];
  const names: string[] = [''];
  for (let length = 1; length <= 5; length++)
    for (const prefix of names.filter((n) => n.length === length - 1)) for (const c of alphabet) names.push(prefix + c);
  // Slugs whose name part itself holds '--', as a deployment named `a--b` has.
  const slugs = [SLUG, 'a--b-12345678', 'x-0123456789abcdef'];
  const hexTails = ['-00000000', '-aaaaaaaa', '-0000000000000000'];
  for (const slug of slugs)
    for (const stem of names)
      for (const name of [stem, ...hexTails.map((tail) => stem + tail)]) {
        if (endpointNameProblem(name, slug) !== null) continue;
        const label = endpointLabel(slug, name);
        assert.equal(isAppSlug(label), false, `${label} reads as a deployment's slug`);
        assert.deepEqual(endpointOfLabel(label, isAppSlug), { slug, name });
      }
});

test('the built-in edge reads endpoint hosts and slugs, and nothing else', () => {
  assert.equal(slugFromHost(`${SLUG}--staging.localhost:8125`, 'localhost'), `${SLUG}--staging`);
  assert.equal(slugFromHost(`${SLUG.toUpperCase()}--STAGING.localhost`, 'localhost'), `${SLUG}--staging`);
  assert.equal(slugFromHost(`${SLUG}.localhost`, 'localhost'), SLUG);
  for (const host of [
    `${SLUG}--.localhost`,
    `--staging.localhost`,
    `support-agent--staging.localhost`,
    `${SLUG}--a--b.localhost`,
    `${SLUG}--x-0b9e1c2d.localhost`.replace('--x', '--X_'),
    `${SLUG}--staging.other.localhost`,
  ])
    assert.equal(slugFromHost(host, 'localhost'), null, host);
});
