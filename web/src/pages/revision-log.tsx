/**
 * A revision's build or runtime log. It is always read as a stream (docs/logs.md): the server sends
 * what is stored, then follows while the revision runs, and says when the log is complete; so one view
 * serves a finished build and a live app alike.
 */
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { data } from '../api/client.ts';
import { followLog, type StatusEvent } from '../api/log-follower.ts';
import type { LogLine, LogType } from '../api/types.ts';
import { ErrorNotice } from '../components/notice.tsx';
import { PageTitle } from '../components/page-title.tsx';
import { StatusBadge } from '../components/status-badge.tsx';
import { useApp, useResource } from '../hooks.ts';

/** Lines kept on screen; a long-running app's older output scrolls off (the API still has it). */
const MAX_LINES = 5_000;

type Phase = 'connecting' | 'following' | 'reconnecting' | 'complete' | 'failed';

const PHASE_TEXT: Record<Phase, string> = {
  connecting: 'Opening the log…',
  following: 'Following live: new lines appear as they are written.',
  reconnecting: 'Connection lost; opening the log again…',
  complete: 'The log is complete.',
  failed: 'The log could not be read.',
};

const timeOfDay = new Intl.DateTimeFormat(undefined, {
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  hour12: false,
});

export function RevisionLogPage({
  deploymentId,
  revisionId,
  type,
}: {
  deploymentId: string;
  revisionId: string;
  type: LogType;
}) {
  const { api } = useApp();
  const [{ lines, dropped }, setShown] = useState<{ lines: LogLine[]; dropped: number }>({ lines: [], dropped: 0 });
  const [phase, setPhase] = useState<Phase>('connecting');
  const [status, setStatus] = useState<StatusEvent | null>(null);
  const [error, setError] = useState<unknown>(null);
  const box = useRef<HTMLDivElement>(null);
  const atBottom = useRef(true);

  const deployment = useResource(
    () => data(api.GET('/v2/deployments/{deployment_id}', { params: { path: { deployment_id: deploymentId } } })),
    [deploymentId],
  );

  useEffect(() => {
    setShown({ lines: [], dropped: 0 });
    setPhase('connecting');
    setError(null);
    // Lines are shown once per frame, however fast they come.
    let pending: LogLine[] = [];
    let frame = 0;
    const show = () => {
      frame = 0;
      const batch = pending;
      pending = [];
      setShown((shown) => {
        const all = shown.lines.concat(batch);
        const cut = Math.max(0, all.length - MAX_LINES);
        return { lines: cut === 0 ? all : all.slice(cut), dropped: shown.dropped + cut };
      });
    };
    return followLog(
      api,
      { deploymentId, revisionId, type },
      {
        onLines(batch) {
          pending.push(...batch);
          if (frame === 0) frame = window.requestAnimationFrame(show);
        },
        onStatus: setStatus,
        onEnd() {
          setPhase('complete');
        },
        onConnection(connected) {
          setPhase(connected ? 'following' : 'reconnecting');
        },
        onError(failure) {
          setError(failure);
          setPhase('failed');
        },
      },
    );
  }, [api, deploymentId, revisionId, type]);

  // Stay at the newest line while the reader is there; leave them be when they scrolled up to read.
  useLayoutEffect(() => {
    const element = box.current;
    if (element && atBottom.current) element.scrollTop = element.scrollHeight;
  }, [lines]);

  const base = `/deployments/${deploymentId}/revisions/${revisionId}/logs`;
  const name = deployment.value?.name ?? 'Deployment';
  return (
    <>
      <PageTitle title={`${type === 'build' ? 'Build' : 'Runtime'} log of revision ${revisionId.slice(0, 8)}`}>
        {status && <StatusBadge status={status.status} />}
      </PageTitle>
      <p>
        <a href={`/deployments/${deploymentId}`}>← {name}</a>
      </p>
      <nav class="tabs" aria-label="Log">
        <a href={base} aria-current={type === 'build' ? 'page' : undefined}>
          Build
        </a>
        <a href={`${base}?type=deploy`} aria-current={type === 'deploy' ? 'page' : undefined}>
          Runtime
        </a>
      </nav>
      <p class="log-state" role="status">
        {PHASE_TEXT[phase]} {lines.length > 0 && <span class="muted">{lines.length + dropped} lines.</span>}
      </p>
      <ErrorNotice error={error} />
      {status?.failure_reason && (
        <div class="failure">
          <p>
            <strong>{status.failure_reason.replace(/_/g, ' ')}</strong>
          </p>
          {status.failure_message && <pre>{status.failure_message}</pre>}
        </div>
      )}
      {dropped > 0 && <p class="muted">The first {dropped} lines are not shown here.</p>}
      <div
        class="log"
        ref={box}
        role="log"
        aria-label={`${type === 'build' ? 'Build' : 'Runtime'} log`}
        tabIndex={0}
        onScroll={(event) => {
          const element = event.currentTarget;
          atBottom.current = element.scrollHeight - element.scrollTop - element.clientHeight < 24;
        }}
      >
        {lines.map((line, i) => (
          <div key={dropped + i} class={`log-line log-line--${line.stream}`}>
            <time dateTime={line.time}>{timeOfDay.format(new Date(line.time))}</time>
            <span class="log-message">{line.message}</span>
          </div>
        ))}
        {lines.length === 0 && phase !== 'connecting' && (
          <p class="log-line muted">{phase === 'complete' ? 'This log has no lines.' : 'No lines yet.'}</p>
        )}
      </div>
    </>
  );
}
