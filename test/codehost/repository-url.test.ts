import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseRepositoryUrl, webOriginOfApiUrl } from '../../src/codehost/repository-url.ts';

test('repository URLs as users paste them are parsed', () => {
  const expected = { origin: 'https://github.com', owner: 'octo-org', name: 'agent' };
  assert.deepEqual(parseRepositoryUrl('https://github.com/octo-org/agent'), expected);
  assert.deepEqual(parseRepositoryUrl('https://github.com/octo-org/agent.git'), expected);
  assert.deepEqual(parseRepositoryUrl('https://GitHub.com/octo-org/agent/'), expected);
  assert.deepEqual(parseRepositoryUrl('https://ghe.example.com/team/my.repo'), {
    origin: 'https://ghe.example.com',
    owner: 'team',
    name: 'my.repo',
  });
});

test('strings that are not repository URLs are refused', () => {
  for (const url of [
    'octo-org/agent',
    'git@github.com:octo-org/agent.git',
    'ftp://github.com/octo-org/agent',
    'https://github.com/octo-org',
    'https://github.com/octo-org/agent/tree/main',
    'https://github.com/octo-org/agent?tab=readme',
    'https://x-access-token:secret@github.com/octo-org/agent',
    'https://github.com/octo-org/..',
    '',
  ]) {
    assert.equal(parseRepositoryUrl(url), null, url);
  }
});

test('the web origin of an API URL: github.com, GHE.com and Enterprise Server', () => {
  assert.equal(webOriginOfApiUrl('https://api.github.com'), 'https://github.com');
  assert.equal(webOriginOfApiUrl('https://api.acme.ghe.com'), 'https://acme.ghe.com');
  assert.equal(webOriginOfApiUrl('https://ghe.example.com/api/v3'), 'https://ghe.example.com');
  assert.equal(webOriginOfApiUrl('https://ghe.example.com:8443/api/v3/'), 'https://ghe.example.com:8443');
});
