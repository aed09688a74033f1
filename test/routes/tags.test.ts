/**
 * The tag model behind the `tag_value_ids` filter (docs/api.md, "Lists and pagination"): tag keys, their
 * values, the values a deployment carries, and the filter itself.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { client, createTestApp, type TestApp } from '../support/harness.ts';

let t: TestApp;
let api: ReturnType<typeof client>;

before(async () => {
  t = await createTestApp();
  api = client(t.app);
});
after(() => t.close());

const MISSING = '00000000-0000-4000-8000-000000000000';

async function deployment(name: string): Promise<string> {
  const res = await api.post('/v2/deployments', {
    name,
    source: 'internal_container',
    source_revision_config: { image_uri: `registry.example.com/${name}:1` },
  });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.id;
}

async function tagKey(key: string, description?: string): Promise<string> {
  const res = await api.post('/v2/tags/keys', { key, ...(description ? { description } : {}) });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.id;
}

async function tagValue(keyId: string, value: string): Promise<string> {
  const res = await api.post(`/v2/tags/keys/${keyId}/values`, { value });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.id;
}

const names = (res: { body: { resources: { name: string }[] } }) => res.body.resources.map((d) => d.name).sort();

describe('tag keys and values', () => {
  test('a key is created with its description, listed, and taken keys are 409', async () => {
    const res = await api.post('/v2/tags/keys', { key: 'owner', description: 'Team that owns the deployment' });
    assert.equal(res.status, 201);
    assert.equal(res.body.key, 'owner');
    assert.equal(res.body.description, 'Team that owns the deployment');
    assert.match(res.body.id, /^[0-9a-f-]{36}$/);
    assert.match(res.body.created_at, /Z$/);

    const listed = await api.get('/v2/tags/keys');
    assert.equal(listed.status, 200);
    assert.deepEqual(
      listed.body.resources.find((k: { id: string }) => k.id === res.body.id),
      res.body,
    );

    const duplicate = await api.post('/v2/tags/keys', { key: 'owner', description: 'another' });
    assert.equal(duplicate.status, 409);
    assert.match(duplicate.body.detail, /owner/);
    const after = (await api.get('/v2/tags/keys?limit=100')).body.resources.filter(
      (k: { key: string }) => k.key === 'owner',
    );
    assert.equal(after.length, 1);
    assert.equal(after[0].description, 'Team that owns the deployment', 'the refused duplicate changed nothing');
  });

  test('values are added to a key, listed, and a taken value is 409; other keys may reuse it', async () => {
    const env = await tagKey('env');
    const region = await tagKey('region');
    const prod = await api.post(`/v2/tags/keys/${env}/values`, { value: 'prod' });
    assert.equal(prod.status, 201);
    assert.equal(prod.body.value, 'prod');
    assert.equal(prod.body.tag_key_id, env);
    await tagValue(env, 'dev');

    const duplicate = await api.post(`/v2/tags/keys/${env}/values`, { value: 'prod' });
    assert.equal(duplicate.status, 409);
    assert.match(duplicate.body.detail, /prod/);
    assert.equal(
      (await api.post(`/v2/tags/keys/${region}/values`, { value: 'prod' })).status,
      201,
      'the same value under another key is fine',
    );

    const values = await api.get(`/v2/tags/keys/${env}/values`);
    assert.equal(values.status, 200);
    assert.deepEqual(values.body.resources.map((v: { value: string }) => v.value).sort(), ['dev', 'prod']);
  });

  test('the values of a key and the tags of a deployment are pages: limit, offset, and the next offset', async () => {
    const id = await deployment('paged-tags');
    const size = await tagKey('size');
    for (const value of ['s', 'm', 'l']) await tagValue(size, value);
    const first = await api.get(`/v2/tags/keys/${size}/values?limit=2`);
    assert.equal(first.status, 200);
    assert.equal(first.body.resources.length, 2);
    assert.equal(first.body.offset, 2);
    const rest = await api.get(`/v2/tags/keys/${size}/values?limit=2&offset=${first.body.offset}`);
    assert.deepEqual(
      [...first.body.resources, ...rest.body.resources].map((v: { value: string }) => v.value),
      ['l', 'm', 's'],
      'newest first, each value once',
    );
    assert.equal(rest.body.offset, 3);
    assert.equal((await api.get(`/v2/tags/keys/${size}/values?limit=101`)).status, 422);

    const keys = [await tagKey('page-a'), await tagKey('page-b'), await tagKey('page-c')];
    const values = await Promise.all(keys.map((k) => tagValue(k, 'on')));
    assert.equal((await api.put(`/v2/deployments/${id}/tags`, { tag_value_ids: values })).status, 200);
    const page = await api.get(`/v2/deployments/${id}/tags?limit=2&offset=1`);
    assert.deepEqual(page.body, {
      resources: [
        { tag_key_id: keys[1], key: 'page-b', tag_value_id: values[1], value: 'on' },
        { tag_key_id: keys[2], key: 'page-c', tag_value_id: values[2], value: 'on' },
      ],
      offset: 3,
    });
    assert.equal((await api.get(`/v2/deployments/${id}/tags?offset=-1`)).status, 422);
  });

  test('values of an unknown key are 404', async () => {
    assert.equal((await api.post(`/v2/tags/keys/${MISSING}/values`, { value: 'x' })).status, 404);
    assert.equal((await api.get(`/v2/tags/keys/${MISSING}/values`)).status, 404);
  });
});

describe('tagging deployments', () => {
  test('PUT sets the whole set of values; GET reads it back; an empty list clears it', async () => {
    const id = await deployment('tagged');
    const tier = await tagKey('tier');
    const gold = await tagValue(tier, 'gold');
    const silver = await tagValue(tier, 'silver');
    const lang = await tagKey('lang');
    const python = await tagValue(lang, 'python');

    const set = await api.put(`/v2/deployments/${id}/tags`, { tag_value_ids: [gold, python] });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    const expected = [
      { tag_key_id: lang, key: 'lang', tag_value_id: python, value: 'python' },
      { tag_key_id: tier, key: 'tier', tag_value_id: gold, value: 'gold' },
    ];
    assert.deepEqual(set.body, { resources: expected, offset: 2 });
    assert.deepEqual((await api.get(`/v2/deployments/${id}/tags`)).body, { resources: expected, offset: 2 });

    const replaced = await api.put(`/v2/deployments/${id}/tags`, { tag_value_ids: [silver] });
    assert.equal(replaced.status, 200);
    assert.deepEqual(
      replaced.body.resources.map((x: { value: string }) => x.value),
      ['silver'],
      'the set is replaced, not added to',
    );

    const cleared = await api.put(`/v2/deployments/${id}/tags`, { tag_value_ids: [] });
    assert.equal(cleared.status, 200);
    assert.deepEqual(cleared.body, { resources: [], offset: 0 });
    assert.deepEqual((await api.get(`/v2/deployments/${id}/tags`)).body, { resources: [], offset: 0 });
  });

  test('an unknown tag value id is 400 naming it, and the deployment keeps its tags', async () => {
    const id = await deployment('keeps-tags');
    const k = await tagKey('stage');
    const v = await tagValue(k, 'beta');
    assert.equal((await api.put(`/v2/deployments/${id}/tags`, { tag_value_ids: [v] })).status, 200);

    const res = await api.put(`/v2/deployments/${id}/tags`, { tag_value_ids: [v, MISSING] });
    assert.equal(res.status, 400);
    assert.match(res.body.detail, new RegExp(MISSING));
    assert.deepEqual(
      (await api.get(`/v2/deployments/${id}/tags`)).body.resources.map((x: { tag_value_id: string }) => x.tag_value_id),
      [v],
    );
  });

  test('the same id in two letter cases is one value', async () => {
    const id = await deployment('case-twice');
    const k = await tagKey('case');
    const v = await tagValue(k, 'both');
    const res = await api.put(`/v2/deployments/${id}/tags`, { tag_value_ids: [v, v.toUpperCase()] });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(
      res.body.resources.map((x: { tag_value_id: string }) => x.tag_value_id),
      [v],
    );
  });

  test('an unknown deployment is 404', async () => {
    assert.equal((await api.put(`/v2/deployments/${MISSING}/tags`, { tag_value_ids: [] })).status, 404);
    assert.equal((await api.get(`/v2/deployments/${MISSING}/tags`)).status, 404);
  });

  test('deleting a value or a key takes it off the deployments that carried it', async () => {
    const id = await deployment('loses-tags');
    const color = await tagKey('color');
    const red = await tagValue(color, 'red');
    const shape = await tagKey('shape');
    const round = await tagValue(shape, 'round');
    assert.equal((await api.put(`/v2/deployments/${id}/tags`, { tag_value_ids: [red, round] })).status, 200);

    assert.equal((await api.delete(`/v2/tags/keys/${color}/values/${red}`)).status, 204);
    assert.deepEqual(
      (await api.get(`/v2/deployments/${id}/tags`)).body.resources.map((x: { value: string }) => x.value),
      ['round'],
    );
    assert.equal((await api.delete(`/v2/tags/keys/${color}/values/${red}`)).status, 404);

    assert.equal((await api.delete(`/v2/tags/keys/${shape}`)).status, 204);
    assert.deepEqual((await api.get(`/v2/deployments/${id}/tags`)).body.resources, []);
    assert.equal((await api.get(`/v2/tags/keys/${shape}/values`)).status, 404);
    assert.equal((await api.post(`/v2/tags/keys/${shape}/values`, { value: 'square' })).status, 404);
  });
});

describe('the tag_value_ids filter', () => {
  let prod: string;
  let dev: string;
  let teamA: string;
  let teamB: string;

  before(async () => {
    const env = await tagKey('filter-env');
    prod = await tagValue(env, 'prod');
    dev = await tagValue(env, 'dev');
    const team = await tagKey('filter-team');
    teamA = await tagValue(team, 'a');
    teamB = await tagValue(team, 'b');
    const carry: [string, string[]][] = [
      ['f-prod-a', [prod, teamA]],
      ['f-prod-b', [prod, teamB]],
      ['f-prod', [prod]],
      ['f-dev-a', [dev, teamA]],
      ['f-untagged', []],
    ];
    for (const [name, values] of carry) {
      const id = await deployment(name);
      assert.equal((await api.put(`/v2/deployments/${id}/tags`, { tag_value_ids: values })).status, 200);
    }
  });

  test('one value matches every deployment carrying it', async () => {
    assert.deepEqual(names(await api.get(`/v2/deployments?tag_value_ids=${prod}`)), ['f-prod', 'f-prod-a', 'f-prod-b']);
    assert.deepEqual(names(await api.get(`/v2/deployments?tag_value_ids=${teamA}`)), ['f-dev-a', 'f-prod-a']);
  });

  test('several values match only deployments carrying all of them', async () => {
    assert.deepEqual(names(await api.get(`/v2/deployments?tag_value_ids=${prod},${teamA}`)), ['f-prod-a']);
    assert.deepEqual(names(await api.get(`/v2/deployments?tag_value_ids=${teamB},${prod}`)), ['f-prod-b']);
    assert.deepEqual(names(await api.get(`/v2/deployments?tag_value_ids=${prod},${dev}`)), []);
    assert.deepEqual(
      names(await api.get(`/v2/deployments?tag_value_ids=${prod},${prod}`)),
      ['f-prod', 'f-prod-a', 'f-prod-b'],
      'a repeated id counts once',
    );
  });

  test('ids in upper case match too; an unknown id matches nothing', async () => {
    assert.deepEqual(
      names(await api.get(`/v2/deployments?tag_value_ids=${prod.toUpperCase()},${teamA.toUpperCase()}`)),
      ['f-prod-a'],
    );
    const unknown = await api.get(`/v2/deployments?tag_value_ids=${MISSING}`);
    assert.equal(unknown.status, 200);
    assert.deepEqual(unknown.body.resources, []);
    assert.deepEqual(names(await api.get(`/v2/deployments?tag_value_ids=${prod},${MISSING}`)), []);
  });

  test('the filter combines with the others and with paging', async () => {
    assert.deepEqual(names(await api.get(`/v2/deployments?tag_value_ids=${prod}&name_contains=-a`)), ['f-prod-a']);
    const first = await api.get(`/v2/deployments?tag_value_ids=${prod}&limit=2`);
    assert.equal(first.body.resources.length, 2);
    assert.equal(first.body.offset, 2);
    const second = await api.get(`/v2/deployments?tag_value_ids=${prod}&limit=2&offset=2`);
    assert.equal(second.body.resources.length, 1);
    assert.equal(second.body.offset, 3);
    const all = [...first.body.resources, ...second.body.resources].map((d: { name: string }) => d.name).sort();
    assert.deepEqual(all, ['f-prod', 'f-prod-a', 'f-prod-b']);
  });

  test('retagging a deployment moves it between filter results', async () => {
    const id = (await api.get('/v2/deployments?name=f-untagged')).body.resources[0].id;
    assert.equal((await api.put(`/v2/deployments/${id}/tags`, { tag_value_ids: [prod, teamA] })).status, 200);
    assert.deepEqual(names(await api.get(`/v2/deployments?tag_value_ids=${prod},${teamA}`)), [
      'f-prod-a',
      'f-untagged',
    ]);
    assert.equal((await api.put(`/v2/deployments/${id}/tags`, { tag_value_ids: [] })).status, 200);
    assert.deepEqual(names(await api.get(`/v2/deployments?tag_value_ids=${prod},${teamA}`)), ['f-prod-a']);
  });
});
