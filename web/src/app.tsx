/** The dashboard: sign-in, then the page the address names, inside the frame with the navigation. */
import { useEffect, useMemo, useState } from 'preact/hooks';
import { UNAUTHORIZED_EVENT, createApi } from './api/client.ts';
import { App as AppContext } from './hooks.ts';
import { Frame } from './components/frame.tsx';
import { ApiKeysPage } from './pages/api-keys.tsx';
import { DeploymentPage } from './pages/deployment.tsx';
import { DeploymentsPage } from './pages/deployments.tsx';
import { IntegrationsPage } from './pages/integrations.tsx';
import { ListenersPage } from './pages/listeners.tsx';
import { NewDeploymentPage } from './pages/new-deployment.tsx';
import { NotFoundPage } from './pages/not-found.tsx';
import { RevisionLogPage } from './pages/revision-log.tsx';
import { SignIn } from './pages/sign-in.tsx';
import { matchPath, navigate, useLocation, type Location } from './router.ts';
import { loadSession, saveSession, ssoWorkspaceId, type Session } from './session.ts';
import { ssoSignOut, ssoStatus, type SsoStatus } from './api/sso.ts';
import { messageOf } from './api/client.ts';

function page(location: Location) {
  const { path } = location;
  if (path === '/' || path === '/deployments') return <DeploymentsPage query={location.query} />;
  if (path === '/deployments/new') return <NewDeploymentPage />;
  let params = matchPath('/deployments/:id/revisions/:revision/logs', path);
  if (params)
    return (
      <RevisionLogPage
        deploymentId={params.id!}
        revisionId={params.revision!}
        type={location.query.get('type') === 'deploy' ? 'deploy' : 'build'}
      />
    );
  params = matchPath('/deployments/:id', path);
  if (params) return <DeploymentPage id={params.id!} offset={Number(location.query.get('offset')) || 0} />;
  if (path === '/listeners') return <ListenersPage />;
  if (path === '/integrations') return <IntegrationsPage />;
  if (path === '/api-keys') return <ApiKeysPage />;
  return <NotFoundPage />;
}

/** A single sign-on session as the dashboard keeps it: the person and their workspaces, never a secret. */
function ssoSession(status: SsoStatus): Session | null {
  const signedIn = status.session;
  if (signedIn === null) return null;
  const workspaces = signedIn.workspaces.map(({ id, name }) => ({ id, name }));
  const picked = ssoWorkspaceId();
  return {
    apiKey: null,
    person: { email: signedIn.email, name: signedIn.name },
    workspace: workspaces.find((w) => w.id === picked) ?? workspaces[0] ?? null,
    workspaces,
  };
}

export function App() {
  const [session, setSession] = useState<Session | null>(loadSession);
  const [signOutReason, setSignOutReason] = useState<string | null>(null);
  // What the service says of single sign-on; null until it has answered (or when it could not).
  const [sso, setSso] = useState<SsoStatus | null>(null);
  const [checking, setChecking] = useState(session === null);
  const location = useLocation();

  const signIn = (next: Session) => {
    saveSession(next);
    setSignOutReason(null);
    setSession(next);
  };
  const signOut = (reason: string | null) => {
    const finish = (why: string | null) => {
      saveSession(null);
      setSignOutReason(why);
      setSession(null);
    };
    // The cookie is HttpOnly: only the service can end the session and remove it. The sign-in page shows
    // once it has (before, a reload right after "Sign out" could find the person still signed in).
    if (session?.apiKey === null && reason === null) {
      ssoSignOut().then(
        () => finish(null),
        (error: unknown) => finish(`Signing out failed: ${messageOf(error)}`),
      );
      return;
    }
    finish(reason);
  };

  useEffect(() => {
    // Without a key in this tab, a single sign-on cookie may be there: ask the service who it is.
    if (session !== null) return;
    ssoStatus().then(
      (status) => {
        setSso(status);
        const signedIn = ssoSession(status);
        if (signedIn !== null) signIn(signedIn);
        setChecking(false);
      },
      () => setChecking(false),
    );
  }, []);

  useEffect(() => {
    const refused = () =>
      signOut(
        session?.apiKey === null
          ? 'Your sign-in has ended (signed out elsewhere, expired, or your access changed). Sign in again.'
          : 'The service no longer accepts this API key (revoked?). Sign in again.',
      );
    window.addEventListener(UNAUTHORIZED_EVENT, refused);
    return () => window.removeEventListener(UNAUTHORIZED_EVENT, refused);
  }, [session?.apiKey]);

  const context = useMemo(
    () =>
      session === null
        ? null
        : {
            session,
            api: createApi(
              { apiKey: session.apiKey, workspaceId: session.workspace?.id ?? null },
              { reportUnauthorized: true },
            ),
          },
    [session],
  );

  if (context === null) {
    if (checking) return <main id="main" aria-busy="true" />;
    return <SignIn onSignedIn={signIn} reason={signOutReason} sso={sso} />;
  }
  return (
    <AppContext.Provider value={context}>
      <Frame
        path={location.path}
        onSignOut={() => signOut(null)}
        onWorkspace={(workspace) => {
          signIn({ ...context.session, workspace });
          navigate('/deployments');
        }}
      >
        {/* Keyed by workspace: a switch starts every page afresh. */}
        <div key={context.session.workspace?.id ?? ''}>{page(location)}</div>
      </Frame>
    </AppContext.Provider>
  );
}
