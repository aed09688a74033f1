/** The frame around every signed-in page: skip link, navigation, the workspace and sign-out. */
import type { ComponentChildren } from 'preact';
import { useApp } from '../hooks.ts';

const SECTIONS = [
  { href: '/deployments', label: 'Deployments' },
  { href: '/listeners', label: 'Listeners' },
  { href: '/integrations', label: 'Code hosts' },
  { href: '/api-keys', label: 'API keys' },
];

interface FrameProps {
  path: string;
  children: ComponentChildren;
  onSignOut: () => void;
  onWorkspace: (workspace: { id: string; name: string }) => void;
}

export function Frame({ path, children, onSignOut, onWorkspace }: FrameProps) {
  const { session } = useApp();
  const current = (href: string) =>
    path === href || path.startsWith(`${href}/`) || (href === '/deployments' && path === '/');
  return (
    <>
      <a class="skip-link" href="#main" data-external>
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href="/deployments">
          Slipway
        </a>
        <nav aria-label="Sections">
          <ul>
            {SECTIONS.map((section) => (
              <li key={section.href}>
                <a href={section.href} aria-current={current(section.href) ? 'page' : undefined}>
                  {section.label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <div class="session">
          {session.workspaces.length > 1 ? (
            <label class="workspace">
              <span>Workspace</span>
              <select
                value={session.workspace?.id ?? ''}
                onChange={(event) => {
                  const chosen = session.workspaces.find((w) => w.id === event.currentTarget.value);
                  if (chosen) onWorkspace(chosen);
                }}
              >
                {session.workspaces.map((w) => (
                  <option key={w.id} value={w.id}>
                    {w.name}
                  </option>
                ))}
              </select>
            </label>
          ) : (
            session.workspace && <span class="muted workspace">Workspace: {session.workspace.name}</span>
          )}
          {session.person && (
            <span class="muted person" title={session.person.name ?? undefined}>
              {session.person.email ?? session.person.name}
            </span>
          )}
          <button type="button" onClick={onSignOut}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        {children}
      </main>
    </>
  );
}
