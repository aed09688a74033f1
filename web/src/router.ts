/**
 * Client-side navigation: the History API and a `useLocation` hook. The service answers every page
 * path with the dashboard (src/routes/dashboard.ts), so deep links and reloads land on the same page.
 */
import { useEffect, useState } from 'preact/hooks';

const NAVIGATED = 'slipway:navigated';

export interface Location {
  path: string;
  query: URLSearchParams;
}

const current = (): Location => ({
  path: window.location.pathname,
  query: new URLSearchParams(window.location.search),
});

export function navigate(to: string, options: { replace?: boolean } = {}): void {
  if (to === window.location.pathname + window.location.search) return;
  if (options.replace) window.history.replaceState(null, '', to);
  else window.history.pushState(null, '', to);
  window.dispatchEvent(new Event(NAVIGATED));
}

export function useLocation(): Location {
  const [location, setLocation] = useState(current);
  useEffect(() => {
    const update = () => setLocation(current());
    window.addEventListener('popstate', update);
    window.addEventListener(NAVIGATED, update);
    return () => {
      window.removeEventListener('popstate', update);
      window.removeEventListener(NAVIGATED, update);
    };
  }, []);
  return location;
}

/** A link click the page handles itself: a plain left click on a same-origin link (not a new tab). */
export function onLinkClick(event: MouseEvent): void {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey)
    return;
  const anchor = (event.target as Element | null)?.closest('a');
  if (!anchor || anchor.target || anchor.hasAttribute('download') || anchor.origin !== window.location.origin) return;
  if (anchor.dataset.external !== undefined) return;
  event.preventDefault();
  navigate(anchor.pathname + anchor.search);
}

/** `/deployments/:id` against a path: the named parts, or null. */
export function matchPath(pattern: string, path: string): Record<string, string> | null {
  const names: string[] = [];
  const source = pattern.replace(/:([a-z_]+)/g, (_, name: string) => {
    names.push(name);
    return '([^/]+)';
  });
  const match = new RegExp(`^${source}/?$`).exec(path);
  if (!match) return null;
  return Object.fromEntries(names.map((name, i) => [name, decodeURIComponent(match[i + 1]!)]));
}

/** A query string from the values that are set. */
export function withQuery(path: string, values: Record<string, string | number | undefined | null>): string {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(values))
    if (value !== undefined && value !== null && value !== '' && value !== 0) query.set(name, String(value));
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}
