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
import { loadSession, saveSession, type Session } from './session.ts';

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

export function App() {
  const [session, setSession] = useState<Session | null>(loadSession);
  const [signOutReason, setSignOutReason] = useState<string | null>(null);
  const location = useLocation();

  const signIn = (next: Session) => {
    saveSession(next);
    setSignOutReason(null);
    setSession(next);
  };
  const signOut = (reason: string | null) => {
    saveSession(null);
    setSignOutReason(reason);
    setSession(null);
  };

  useEffect(() => {
    const refused = () => signOut('The service no longer accepts this API key (revoked?). Sign in again.');
    window.addEventListener(UNAUTHORIZED_EVENT, refused);
    return () => window.removeEventListener(UNAUTHORIZED_EVENT, refused);
  }, []);

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

  if (context === null) return <SignIn onSignedIn={signIn} reason={signOutReason} />;
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
