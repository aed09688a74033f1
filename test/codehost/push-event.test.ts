import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  branchOfRef,
  parsePushEvent,
  pushIsForRepository,
  pushTarget,
  trackedBranch,
} from '../../src/codehost/push-event.ts';

const SHA = '6dcb09b5b57875f334f61aebed695e2e4193db5e';

function payload(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    ref: 'refs/heads/main',
    before: '0'.repeat(40),
    after: SHA,
    created: false,
    deleted: false,
    repository: {
      id: 1296269,
      full_name: 'octo-org/agent',
      html_url: 'https://github.com/octo-org/agent',
      clone_url: 'https://github.com/octo-org/agent.git',
    },
    pusher: { name: 'octocat' },
    ...overrides,
  };
}

test('a branch push is parsed and builds its branch at the pushed commit', () => {
  const parsed = parsePushEvent(payload());
  assert.ok(parsed.ok);
  assert.deepEqual(parsed.event, {
    ref: 'refs/heads/main',
    after: SHA,
    deleted: false,
    repository: {
      full_name: 'octo-org/agent',
      html_url: 'https://github.com/octo-org/agent',
      clone_url: 'https://github.com/octo-org/agent.git',
    },
  });
  assert.deepEqual(pushTarget(parsed.event), { kind: 'branch', branch: 'main', commitSha: SHA });
});

test('branch names with slashes are kept whole; tags and other refs are not branches', () => {
  assert.equal(branchOfRef('refs/heads/main'), 'main');
  assert.equal(branchOfRef('refs/heads/feature/login'), 'feature/login');
  assert.equal(branchOfRef('refs/tags/v1.0.0'), null);
  assert.equal(branchOfRef('refs/pull/1/head'), null);
  assert.equal(branchOfRef('refs/heads/'), null);
});

test('a tag push builds nothing', () => {
  const parsed = parsePushEvent(payload({ ref: 'refs/tags/v1.0.0' }));
  assert.ok(parsed.ok);
  const target = pushTarget(parsed.event);
  assert.equal(target.kind === 'ignored' && target.reason, 'tag');
});

test('a branch deletion builds nothing', () => {
  const parsed = parsePushEvent(payload({ after: '0'.repeat(40), deleted: true }));
  assert.ok(parsed.ok);
  const target = pushTarget(parsed.event);
  assert.equal(target.kind === 'ignored' && target.reason, 'branch_deleted');
  // A sender that omits `deleted` still signals deletion with the all-zero commit.
  const bare = parsePushEvent(payload({ after: '0'.repeat(40), deleted: undefined }));
  assert.ok(bare.ok && bare.event.deleted);
});

test('malformed payloads are refused with a message naming the field', () => {
  const cases: [unknown, RegExp][] = [
    [null, /JSON object/],
    [[payload()], /JSON object/],
    [payload({ ref: undefined }), /^ref/],
    [payload({ ref: 'main' }), /^ref/],
    [payload({ after: 'abc' }), /^after/],
    [payload({ after: SHA.toUpperCase() }), /^after/],
    [payload({ deleted: 'no' }), /^deleted/],
    [payload({ repository: undefined }), /^repository/],
    [
      payload({ repository: { full_name: 'octo-org/agent', clone_url: 'https://github.com/octo-org/agent.git' } }),
      /^repository\.html_url/,
    ],
    [
      payload({
        repository: {
          full_name: 'agent',
          html_url: 'https://github.com/octo-org/agent',
          clone_url: 'https://github.com/octo-org/agent.git',
        },
      }),
      /^repository\.full_name/,
    ],
    [
      payload({
        repository: { full_name: 'octo-org/agent', html_url: 'https://github.com/octo-org/agent', clone_url: 42 },
      }),
      /^repository\.clone_url/,
    ],
  ];
  for (const [input, message] of cases) {
    const parsed = parsePushEvent(input);
    assert.equal(parsed.ok, false, JSON.stringify(input));
    assert.match(!parsed.ok ? parsed.message : '', message);
  }
});

test('a SHA-256 repository commit id is accepted', () => {
  assert.ok(parsePushEvent(payload({ after: 'a'.repeat(64) })).ok);
});

test('a push matches a deployment repo_url by web or clone URL, ignoring case and .git', () => {
  const parsed = parsePushEvent(payload());
  assert.ok(parsed.ok);
  assert.ok(pushIsForRepository(parsed.event, 'https://github.com/octo-org/agent'));
  assert.ok(pushIsForRepository(parsed.event, 'https://GitHub.com/Octo-Org/Agent.git'));
  assert.ok(pushIsForRepository(parsed.event, 'https://github.com/octo-org/agent/'));
  assert.ok(!pushIsForRepository(parsed.event, 'https://github.com/octo-org/agent-2'));
  assert.ok(!pushIsForRepository(parsed.event, 'https://ghe.example.com/octo-org/agent'));
});

test('a deployment ref tracks a branch unless it is a tag', () => {
  assert.equal(trackedBranch('main'), 'main');
  assert.equal(trackedBranch('refs/heads/release/1.x'), 'release/1.x');
  assert.equal(trackedBranch('refs/tags/v1'), null);
  assert.equal(trackedBranch(''), null);
});
