/**
 * One deployment: its status, stable URL (and, for a LangGraph project, its MCP and A2A addresses and
 * protocol credentials), revisions in use, source, secret names and tags, its endpoints and their
 * traffic splits, and its revisions as a
 * timeline with redeploy and interrupt. A revision in progress is followed on the
 * service's event stream of its build log (what the SDK's wait uses), so each change shows as it
 * happens; a slow poll stands in only while no stream is open (a deployment being set up or deleted,
 * a dropped connection).
 */
import { useEffect, useState } from 'preact/hooks';
import { agentProtocolAddresses } from '@slipway/sdk/agent-protocols';
import { followLog } from '@slipway/sdk/revision-follow';
import { data } from '../api/client.ts';
import { logStreamSource } from '../api/log-follower.ts';
import { explainDeployments } from '../api/status-explanations.ts';
import { isFinalRevision, type Deployment } from '../api/types.ts';
import { DeploymentActivity } from '../components/deployment-activity.tsx';
import { DeploymentCharts } from '../components/deployment-charts.tsx';
import { DeploymentEndpoints } from '../components/deployment-endpoints.tsx';
import { DeploymentStatus } from '../components/deployment-status.tsx';
import { ErrorNotice, Notice } from '../components/notice.tsx';
import { PageTitle } from '../components/page-title.tsx';
import { ProtocolCredentials } from '../components/protocol-credentials.tsx';
import { RevisionTimeline, redeployRestores } from '../components/revision-timeline.tsx';
import { Time } from '../components/time.tsx';
import { useApp, useInterval, useResource } from '../hooks.ts';
import { navigate, withQuery } from '../router.ts';

const REVISIONS_PER_PAGE = 10;
/** The fallback poll, while nothing is streamed. */
const FALLBACK_REFRESH_MS = 10_000;

const shortId = (id: string | null) => (id === null ? null : id.slice(0, 8));

/** What resource_spec asks to run (min_scale web instances, queue_min_scale workers); changed in place. */
function instancesOf(spec: Deployment['source_config']['resource_spec']): string {
  const web = typeof spec?.min_scale === 'number' ? spec.min_scale : 1;
  const workers = typeof spec?.queue_min_scale === 'number' ? `, ${spec.queue_min_scale} worker` : '';
  return `${web} web${workers}`;
}

function SourceDetails({ deployment }: { deployment: Deployment }) {
  const c = deployment.source_config;
  const r = deployment.source_revision_config;
  const rows: [string, string | null | undefined][] = [
    ['Kind', deployment.source.replace(/_/g, ' ')],
    ['Image', r.image_uri],
    ['Uploaded archive', r.source_tarball_path],
    ['Repository', c.repo_url],
    ['Ref', r.repo_ref],
    ['Commit', r.repo_commit_sha],
    ['App config', r.framework_config_path],
    ['Listener', c.listener_id],
    ['Install command', c.install_command],
    ['Build command', c.build_command],
    ['Type', c.deployment_type],
  ];
  return (
    <dl class="facts">
      {rows
        .filter(([, value]) => value !== null && value !== undefined && value !== '')
        .map(([label, value]) => (
          <div key={label}>
            <dt>{label}</dt>
            <dd class="breakable">{value}</dd>
          </div>
        ))}
    </dl>
  );
}

export function DeploymentPage({ id, offset }: { id: string; offset: number }) {
  const { api } = useApp();
  const [actionError, setActionError] = useState<unknown>(null);
  const [actionDone, setActionDone] = useState<string | null>(null);
  const deployment = useResource(
    () => data(api.GET('/v2/deployments/{deployment_id}', { params: { path: { deployment_id: id } } })),
    [id],
  );
  const tags = useResource(
    // A deployment carries at most 100 tag values: one page holds them all.
    () =>
      data(
        api.GET('/v2/deployments/{deployment_id}/tags', {
          params: { path: { deployment_id: id }, query: { limit: 100 } },
        }),
      ).then((page) => page.resources),
    [id],
  );
  const revisions = useResource(
    () =>
      data(
        api.GET('/v2/deployments/{deployment_id}/revisions', {
          params: { path: { deployment_id: id }, query: { limit: REVISIONS_PER_PAGE, offset } },
        }),
      ),
    [id, offset],
  );

  const d = deployment.value;
  // Why it has its status, again whenever the deployment or its revisions are read again. When that
  // cannot be read, the badge stands alone: the page's own reads report the service's trouble.
  const explanation = useResource(
    async () => (d ? explainDeployments(api, [d], revisions.value?.resources).then((why) => why.get(d.id)) : undefined),
    [d, revisions.value],
  );
  const inProgress =
    (revisions.value?.resources ?? []).some((r) => !isFinalRevision(r.status)) ||
    d?.status === 'AWAITING_DATABASE' ||
    d?.status === 'AWAITING_DELETE';
  // The newest revision in progress (the list is newest first), on this page of the list.
  const followedId = revisions.value?.resources.find((r) => !isFinalRevision(r.status))?.id ?? null;
  const [streaming, setStreaming] = useState(false);
  useEffect(() => {
    setStreaming(false);
    if (followedId === null) return;
    const abort = new AbortController();
    const refresh = () => {
      deployment.reload();
      revisions.reload();
    };
    void (async () => {
      try {
        for await (const event of followLog(logStreamSource(api), id, followedId, {
          type: 'build',
          signal: abort.signal,
          maxReconnects: Infinity,
          onConnection: setStreaming,
        })) {
          // Every status change, and the end of the build log (the revision's final state), reloads.
          if (event.kind !== 'line') refresh();
        }
      } catch {
        // A refusal (the revision is gone): the fallback poll and the reload show what happened.
        if (!abort.signal.aborted) setStreaming(false);
      }
    })();
    return () => abort.abort();
  }, [api, id, followedId]);
  useInterval(
    () => {
      deployment.reload();
      revisions.reload();
    },
    FALLBACK_REFRESH_MS,
    inProgress && !streaming && deployment.error === null,
  );

  const act = async (action: 'redeploy' | 'interrupt', revisionId: string) => {
    setActionError(null);
    setActionDone(null);
    const path = { deployment_id: id, revision_id: revisionId };
    try {
      if (action === 'redeploy') {
        const redeployed = await data(
          api.POST('/v2/deployments/{deployment_id}/revisions/{revision_id}/redeploy', { params: { path } }),
        );
        setActionDone(
          `Redeploying revision ${shortId(revisionId)} as revision ${shortId(redeployed.latest_revision_id)}. ` +
            redeployRestores(instancesOf(redeployed.source_config.resource_spec)),
        );
      } else
        await data(api.POST('/v2/deployments/{deployment_id}/revisions/{revision_id}/interrupt', { params: { path } }));
      // The new revision is the first of the list.
      if (offset !== 0) navigate(`/deployments/${id}`);
    } catch (error) {
      setActionError(error);
    }
    deployment.reload();
    revisions.reload();
  };

  if (!d) {
    return (
      <>
        <PageTitle title={deployment.error ? 'Deployment not found' : 'Deployment'} />
        <ErrorNotice error={deployment.error} />
        {!deployment.error && <p class="muted">Loading…</p>}
      </>
    );
  }

  const url = d.source_config.custom_url;
  // The serving revision's config (else the newest's), when it is on this page of the list.
  const shown = revisions.value?.resources.find((r) => r.id === (d.active_revision_id ?? d.latest_revision_id));
  const protocols = agentProtocolAddresses(url, shown?.source_revision_config.framework_config_path);
  return (
    <>
      <PageTitle title={d.name}>
        <DeploymentStatus status={d.status} why={explanation.value} label="Status" />
      </PageTitle>
      <ErrorNotice error={deployment.error} />
      <section class="panel" aria-labelledby="overview">
        <h2 id="overview">Overview</h2>
        <dl class="facts">
          <div>
            <dt>Stable URL</dt>
            <dd class="breakable">
              {url ? (
                <a href={url} data-external rel="noreferrer" target="_blank">
                  {url}
                </a>
              ) : (
                <span class="muted">none yet</span>
              )}
            </dd>
          </div>
          {protocols && (
            <div>
              <dt>MCP and A2A</dt>
              <dd class="breakable">
                <code>{protocols.mcp}</code>
                <br />
                <code>{protocols.a2a}</code>
                <br />
                <code>{protocols.agentCard}</code>
              </dd>
            </div>
          )}
          <div>
            <dt>Active revision</dt>
            <dd>
              {d.active_revision_id ? (
                <code>{shortId(d.active_revision_id)}</code>
              ) : (
                <span class="muted">none serving</span>
              )}
            </dd>
          </div>
          <div>
            <dt>Latest revision</dt>
            <dd>
              {d.latest_revision_id ? <code>{shortId(d.latest_revision_id)}</code> : <span class="muted">none</span>}
            </dd>
          </div>
          <div>
            <dt>Instances</dt>
            <dd>{instancesOf(d.source_config.resource_spec)}</dd>
          </div>
          <div>
            <dt>Created</dt>
            <dd>
              <Time iso={d.created_at} />
            </dd>
          </div>
          <div>
            <dt>Id</dt>
            <dd>
              <code class="breakable">{d.id}</code>
            </dd>
          </div>
        </dl>
      </section>
      <div class="columns">
        <section class="panel" aria-labelledby="source">
          <h2 id="source">Source</h2>
          <SourceDetails deployment={d} />
        </section>
        <section class="panel" aria-labelledby="secrets">
          <h2 id="secrets">Secrets</h2>
          {d.secrets.length === 0 ? (
            <p class="muted">No secrets.</p>
          ) : (
            <ul class="chips" aria-label="Secret names (values are never shown)">
              {d.secrets.map((s) => (
                <li key={s.name}>
                  <code>{s.name}</code>
                </li>
              ))}
            </ul>
          )}
          <h2 id="tags">Tags</h2>
          <ErrorNotice error={tags.error} />
          {tags.value && tags.value.length === 0 && <p class="muted">No tags.</p>}
          {tags.value && tags.value.length > 0 && (
            <ul class="chips" aria-labelledby="tags">
              {tags.value.map((t) => (
                <li key={t.tag_value_id}>
                  {t.key}: {t.value}
                </li>
              ))}
            </ul>
          )}
        </section>
      </div>
      {protocols && (
        <section class="panel" aria-labelledby="protocol-credentials">
          <h2 id="protocol-credentials">MCP and A2A credentials</h2>
          <ProtocolCredentials deploymentId={d.id} />
        </section>
      )}
      <section class="panel" aria-labelledby="endpoints">
        <h2 id="endpoints">Endpoints</h2>
        <DeploymentEndpoints deploymentId={d.id} revisions={revisions.value?.resources ?? []} />
      </section>
      <section class="panel" aria-labelledby="traffic">
        <h2 id="traffic">Traffic and resources</h2>
        <DeploymentCharts deploymentId={d.id} />
      </section>
      <section class="panel" aria-labelledby="revisions">
        <h2 id="revisions">Revisions</h2>
        <ErrorNotice error={actionError ?? revisions.error} />
        {actionDone && <Notice>{actionDone}</Notice>}
        <RevisionTimeline
          deploymentId={d.id}
          revisions={revisions.value?.resources}
          activeRevisionId={d.active_revision_id}
          latestRevisionId={d.latest_revision_id}
          offset={offset}
          limit={REVISIONS_PER_PAGE}
          onOffset={(next) => navigate(withQuery(`/deployments/${d.id}`, { offset: next }))}
          onAction={act}
          instances={instancesOf(d.source_config.resource_spec)}
        />
      </section>
      <section class="panel" aria-labelledby="activity">
        <h2 id="activity">Activity</h2>
        <DeploymentActivity
          deploymentId={d.id}
          changed={`${d.status}|${d.updated_at}|${revisions.value?.resources.map((r) => r.status).join(',') ?? ''}`}
        />
      </section>
    </>
  );
}
