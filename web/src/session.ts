/**
 * The signed-in key, kept in the browser's session storage: it lasts while the tab is open and is gone
 * when it closes, and other sites cannot read it. Organization keys also keep the workspace they act
 * in (sent as X-Tenant-Id) and, for admin keys, the workspaces to switch between.
 */
import type { Workspace } from './api/types.ts';

export interface Session {
  apiKey: string;
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
    return { apiKey: parsed.apiKey, workspace: parsed.workspace ?? null, workspaces: parsed.workspaces ?? [] };
  } catch {
    // Storage disabled or a value from another version: sign in again.
    return null;
  }
}

export function saveSession(session: Session | null): void {
  if (session === null) window.sessionStorage.removeItem(STORAGE_KEY);
  else window.sessionStorage.setItem(STORAGE_KEY, JSON.stringify(session));
}
