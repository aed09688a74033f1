/** Loading data into a page: the last good value stays on screen while the next one loads (no flicker). */
import { createContext } from 'preact';
import { useCallback, useContext, useEffect, useRef, useState } from 'preact/hooks';
import type { Api } from './api/client.ts';
import type { Session } from './session.ts';

export interface AppContext {
  api: Api;
  session: Session;
}

export const App = createContext<AppContext | null>(null);

export function useApp(): AppContext {
  const context = useContext(App);
  if (context === null) throw new Error('useApp outside the signed-in app');
  return context;
}

export interface Resource<T> {
  value: T | undefined;
  error: unknown;
  loading: boolean;
  reload(): void;
}

/** Runs `load` now and whenever `deps` change; `reload()` runs it again. Answers of stale runs are dropped. */
export function useResource<T>(load: () => Promise<T>, deps: unknown[]): Resource<T> {
  const [state, setState] = useState<{ value: T | undefined; error: unknown; loading: boolean }>({
    value: undefined,
    error: null,
    loading: true,
  });
  const [generation, setGeneration] = useState(0);
  const run = useRef(0);
  useEffect(() => {
    const id = ++run.current;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (value) => id === run.current && setState({ value, error: null, loading: false }),
      (error: unknown) => id === run.current && setState((s) => ({ value: s.value, error, loading: false })),
    );
  }, [...deps, generation]);
  const reload = useCallback(() => setGeneration((g) => g + 1), []);
  return { ...state, reload };
}

/** Calls `tick` every `ms` while `active`; how pages keep up with a deployment in progress. */
export function useInterval(tick: () => void, ms: number, active: boolean): void {
  const latest = useRef(tick);
  latest.current = tick;
  useEffect(() => {
    if (!active) return;
    const timer = window.setInterval(() => latest.current(), ms);
    return () => window.clearInterval(timer);
  }, [ms, active]);
}
