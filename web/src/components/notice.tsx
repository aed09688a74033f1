/** Messages: an error is announced at once (role=alert); progress and results politely (role=status). */
import type { ComponentChildren } from 'preact';
import { messageOf } from '../api/client.ts';

export function ErrorNotice({ error }: { error: unknown }) {
  if (error === null || error === undefined) return null;
  return (
    <p class="notice notice--error" role="alert">
      {messageOf(error)}
    </p>
  );
}

export function Notice({ children }: { children: ComponentChildren }) {
  return (
    <p class="notice" role="status">
      {children}
    </p>
  );
}
