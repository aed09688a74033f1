/**
 * The deployments of the workspace, newest first: search by name, filter by status and tag, a page at
 * a time. Filters live in the address, so a filtered list can be reloaded, shared and gone back to.
 */
import { useEffect, useState } from 'preact/hooks';
import { data } from '../api/client.ts';
import { explainDeployments } from '../api/status-explanations.ts';
import { DEPLOYMENT_STATUSES, type DeploymentQuery, type TagKey, type TagValue } from '../api/types.ts';
import { ErrorNotice } from '../components/notice.tsx';
import { PageTitle } from '../components/page-title.tsx';
import { Pager } from '../components/pager.tsx';
import { DeploymentStatus } from '../components/deployment-status.tsx';
import { Time } from '../components/time.tsx';
import { useApp, useResource } from '../hooks.ts';
import { navigate, withQuery } from '../router.ts';

const LIMIT = 20;
/** Typing waits this long for the next key before the list is asked for again. */
const SEARCH_PAUSE_MS = 250;

type Status = NonNullable<DeploymentQuery['status']>;

export function DeploymentsPage({ query }: { query: URLSearchParams }) {
  const { api } = useApp();
  const name = query.get('name') ?? '';
  const status = (DEPLOYMENT_STATUSES as readonly string[]).includes(query.get('status') ?? '')
    ? (query.get('status') as Status)
    : undefined;
  const tag = query.get('tag') ?? '';
  const offset = Math.max(0, Number(query.get('offset')) || 0);
  const [search, setSearch] = useState(name);

  /** Changes some filters; read from the address at the time of the change, as a pending search may fire after another filter changed. */
  const show = (change: { name?: string; status?: string; tag?: string; offset?: number }) => {
    const now = new URLSearchParams(window.location.search);
    const values = { name: now.get('name'), status: now.get('status'), tag: now.get('tag'), offset: 0, ...change };
    navigate(withQuery('/deployments', values), { replace: change.offset === undefined });
  };

  useEffect(() => {
    if (search.trim() === name) return;
    const timer = window.setTimeout(() => show({ name: search.trim() }), SEARCH_PAUSE_MS);
    return () => window.clearTimeout(timer);
  }, [search]);

  const tags = useResource(async () => {
    const { resources: keys } = await data(api.GET('/v2/tags/keys', { params: { query: { limit: 100 } } }));
    const values = await Promise.all(
      keys.map((key) =>
        data(
          api.GET('/v2/tags/keys/{tag_key_id}/values', {
            params: { path: { tag_key_id: key.id }, query: { limit: 100 } },
          }),
        ).then((page) => page.resources),
      ),
    );
    return keys.map((key, i): [TagKey, TagValue[]] => [key, values[i] ?? []]);
  }, []);

  const list = useResource(
    () =>
      data(
        api.GET('/v2/deployments', {
          params: {
            query: {
              limit: LIMIT,
              offset,
              ...(name ? { name_contains: name } : {}),
              ...(status ? { status } : {}),
              ...(tag ? { tag_value_ids: tag } : {}),
            },
          },
        }),
      ),
    [name, status, tag, offset],
  );
  const deployments = list.value?.resources ?? [];
  // Why each one has its status (the CLI's words): a failed build or a listener awaited, not just "awaiting database".
  const explanations = useResource(async () => explainDeployments(api, deployments), [list.value]);
  const filtered = name !== '' || status !== undefined || tag !== '';

  return (
    <>
      <PageTitle title="Deployments">
        <a class="button primary" href="/deployments/new">
          New deployment
        </a>
      </PageTitle>
      <form class="filters" role="search" onSubmit={(event) => (event.preventDefault(), show({ name: search.trim() }))}>
        <label>
          <span>Name contains</span>
          <input
            type="search"
            value={search}
            onInput={(event) => setSearch(event.currentTarget.value)}
            maxLength={63}
            spellcheck={false}
          />
        </label>
        <label>
          <span>Status</span>
          <select value={status ?? ''} onChange={(event) => show({ status: event.currentTarget.value })}>
            <option value="">Any</option>
            {DEPLOYMENT_STATUSES.map((s) => (
              <option key={s} value={s}>
                {s.replace(/_/g, ' ').toLowerCase()}
              </option>
            ))}
          </select>
        </label>
        <label>
          <span>Tag</span>
          <select
            value={tag}
            onChange={(event) => show({ tag: event.currentTarget.value })}
            disabled={!tags.value?.length}
          >
            <option value="">{tags.value?.length ? 'Any' : 'No tags yet'}</option>
            {tags.value?.map(([key, values]) => (
              <optgroup key={key.id} label={key.key}>
                {values.map((value) => (
                  <option key={value.id} value={value.id}>
                    {key.key}: {value.value}
                  </option>
                ))}
              </optgroup>
            ))}
          </select>
        </label>
      </form>
      <ErrorNotice error={list.error ?? tags.error} />
      <div class="table-frame" aria-busy={list.loading}>
        <table class="list">
          <caption class="visually-hidden">Deployments, newest first</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Status</th>
              <th scope="col" class="wide-only">
                Source
              </th>
              <th scope="col" class="wide-only">
                Created
              </th>
            </tr>
          </thead>
          <tbody>
            {deployments.map((d) => (
              <tr key={d.id}>
                <th scope="row">
                  <a href={`/deployments/${d.id}`}>{d.name}</a>
                </th>
                <td>
                  <DeploymentStatus status={d.status} why={explanations.value?.get(d.id)} />
                </td>
                <td class="wide-only">{d.source.replace(/_/g, ' ')}</td>
                <td class="wide-only">
                  <Time iso={d.created_at} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
        {list.value && deployments.length === 0 && (
          <p class="empty">
            {filtered
              ? 'No deployment matches these filters.'
              : offset > 0
                ? 'No more deployments.'
                : 'No deployments yet. Make the first one with “New deployment”.'}
          </p>
        )}
        {!list.value && list.loading && <p class="empty muted">Loading…</p>}
      </div>
      <Pager offset={offset} shown={deployments.length} limit={LIMIT} onOffset={(next) => show({ offset: next })} />
    </>
  );
}
