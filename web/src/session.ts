/**
 * Who is signed in. With an API key: the key, kept in the browser's session storage (it lasts while the
 * tab is open and is gone when it closes, and other sites cannot read it); organization keys also keep
 * the workspace they act in (sent as X-Tenant-Id) and, for admin keys, the workspaces to switch between.
 * With single sign-on: nothing secret in the page at all. The session is an HttpOnly cookie the page
 * cannot read; the service says who it is (GET /v2/sso/session), and only the workspace picked is kept.
 */
import type { Workspace } from './api/types.ts';

export interface Session {
  /** Null when signed in through single sign-on: the cookie goes with every request by itself. */
  apiKey: string | null;
  /** The person signed in through single sign-on; null with an API key. */
  person: { email: string | null; name: string | null } | null;
  /** The workspace requests act in; null for a key bound to one workspace (the service knows which). */
  workspace: { id: string; name: string } | null;
  /** The organization's workspaces, when the key may list them (organization admin keys). */
  workspaces: Pick<Workspace, 'id' | 'name'>[];
}

const STORAGE_KEY = 'slipway.session';

export function loadSession(): Session | null {
  try {
    const raw = window.sessionStorage.getItem(STORAGE_KEY);
    if (raw === null) return null;
    const parsed = JSON.parse(raw) as Partial<Session>;
    if (typeof parsed.apiKey !== 'string' || parsed.apiKey === '') return null;
    return {
      apiKey: parsed.apiKey,
      person: null,
      workspace: parsed.workspace ?? null,
      workspaces: parsed.workspaces ?? [],
    };
  } catch {
    // Storage disabled or a value from another version: sign in again.
    return null;
  }
}

export function saveSession(session: Session | null): void {
  if (session === null) {
    window.sessionStorage.removeItem(STORAGE_KEY);
    window.sessionStorage.removeItem(SSO_WORKSPACE_KEY);
  } else if (session.apiKey === null) {
    // A single sign-on session: only the workspace picked, never anything that opens the API.
    if (session.workspace) window.sessionStorage.setItem(SSO_WORKSPACE_KEY, session.workspace.id);
  } else window.sessionStorage.setItem(STORAGE_KEY, JSON.stringify(session));
}

const SSO_WORKSPACE_KEY = 'slipway.sso-workspace';

/** The workspace picked in this tab during a single sign-on session. */
export function ssoWorkspaceId(): string | null {
  try {
    return window.sessionStorage.getItem(SSO_WORKSPACE_KEY);
  } catch {
    return null;
  }
}
