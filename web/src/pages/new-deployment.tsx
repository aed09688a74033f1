/**
 * A new deployment from an uploaded source archive (internal_source: upload, then create) or from a
 * container image (on this service, or on a listener's cluster). On success the deployment's page
 * opens and follows it until it serves or fails.
 */
import { useState } from 'preact/hooks';
import { data } from '../api/client.ts';
import type { CreateDeploymentBody } from '../api/types.ts';
import { ErrorNotice } from '../components/notice.tsx';
import { PageTitle } from '../components/page-title.tsx';
import { SecretsEditor, type SecretRow } from '../components/secrets-editor.tsx';
import { field } from '../forms.ts';
import { useApp, useResource } from '../hooks.ts';
import { navigate } from '../router.ts';

// The server's rule (DEPLOYMENT_NAME_PATTERN). Browsers compile a pattern with the v flag, where a '-' in a
// character class must be escaped: unescaped, the pattern is invalid and silently checks nothing.
const NAME_PATTERN = '^[a-z]([a-z0-9\\-]{0,61}[a-z0-9])?$';
const THIS_SERVICE = '';

export function NewDeploymentPage() {
  const { api } = useApp();
  const [kind, setKind] = useState<'archive' | 'image'>('archive');
  const [secrets, setSecrets] = useState<SecretRow[]>([]);
  const [runOn, setRunOn] = useState(THIS_SERVICE);
  const [progress, setProgress] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const listeners = useResource(() => data(api.GET('/v2/listeners', { params: { query: { limit: 100 } } })), []);
  const listener = listeners.value?.resources.find((l) => l.id === runOn);

  const create = async (form: FormData) => {
    const name = field(form, 'name');
    const secretList = secrets.map((s) => ({ name: s.name.trim(), value: s.value }));
    let body: CreateDeploymentBody;
    if (kind === 'archive') {
      const archive = form.get('archive');
      if (!(archive instanceof File) || archive.size === 0) throw new Error('Choose a source archive (.tar.gz).');
      setProgress(`Uploading ${archive.name}…`);
      const upload = await data(
        api.POST('/v2/uploads', {
          body: archive,
          // The archive goes as it is: the API takes the raw gzip bytes, not JSON.
          bodySerializer: (file: unknown) => file as File,
          headers: { 'content-type': 'application/gzip' },
        }),
      );
      body = {
        name,
        source: 'internal_source',
        secrets: secretList,
        source_revision_config: {
          source_tarball_path: upload.source_tarball_path,
          framework_config_path: field(form, 'config-path') || 'slipway.json',
        },
      };
    } else {
      const image = field(form, 'image');
      const namespace = field(form, 'namespace');
      body = listener
        ? {
            name,
            source: 'external_container',
            secrets: secretList,
            source_config: {
              listener_id: listener.id,
              ...(namespace ? { listener_config: { k8s_namespace: namespace } } : {}),
            },
            source_revision_config: { image_uri: image },
          }
        : { name, source: 'internal_container', secrets: secretList, source_revision_config: { image_uri: image } };
    }
    setProgress('Creating the deployment…');
    const created = await data(api.POST('/v2/deployments', { body }));
    navigate(`/deployments/${created.id}`);
  };

  return (
    <>
      <PageTitle title="New deployment" />
      <form
        class="stacked"
        onSubmit={(event) => {
          event.preventDefault();
          setError(null);
          create(new FormData(event.currentTarget)).catch((failure: unknown) => {
            setError(failure);
            setProgress(null);
          });
        }}
      >
        <label for="name">Name</label>
        <input
          id="name"
          name="name"
          required
          maxLength={63}
          pattern={NAME_PATTERN}
          autocomplete="off"
          spellcheck={false}
          aria-describedby="name-help"
        />
        <p id="name-help" class="help">
          Lowercase letters, digits and -, starting with a letter. It becomes part of the app's address and cannot
          change.
        </p>

        <fieldset>
          <legend>Source</legend>
          <label class="choice">
            <input
              type="radio"
              name="kind"
              value="archive"
              checked={kind === 'archive'}
              onChange={() => setKind('archive')}
            />{' '}
            Upload a source archive
          </label>
          <label class="choice">
            <input
              type="radio"
              name="kind"
              value="image"
              checked={kind === 'image'}
              onChange={() => setKind('image')}
            />{' '}
            Container image
          </label>
        </fieldset>

        {kind === 'archive' ? (
          <div class="group">
            <label for="archive">Source archive</label>
            <input
              id="archive"
              name="archive"
              type="file"
              accept=".tar.gz,.tgz,application/gzip"
              required
              aria-describedby="archive-help"
            />
            <p id="archive-help" class="help">
              A gzipped tarball of the app's folder, e.g. <code>tar czf app.tar.gz -C my-app .</code>
            </p>
            <label for="config-path">App config file in the archive</label>
            <input id="config-path" name="config-path" defaultValue="slipway.json" required spellcheck={false} />
          </div>
        ) : (
          <div class="group">
            <label for="image">Image</label>
            <input id="image" name="image" required spellcheck={false} placeholder="registry.example.com/agent:1.0.0" />
            <label for="run-on">Run on</label>
            <select
              id="run-on"
              value={runOn}
              onChange={(event) => setRunOn(event.currentTarget.value)}
              aria-describedby="run-on-help"
            >
              <option value={THIS_SERVICE}>This service</option>
              {listeners.value?.resources.map((l) => (
                <option key={l.id} value={l.id}>
                  Listener {l.compute_id} ({l.state.replace(/_/g, ' ')})
                </option>
              ))}
            </select>
            <p id="run-on-help" class="help">
              This service runs images only with a container engine; a listener runs them in its Kubernetes cluster.
            </p>
            {listener && (
              <>
                <label for="namespace">Namespace</label>
                <select id="namespace" name="namespace">
                  {listener.compute_config.k8s_namespaces.map((n) => (
                    <option key={n} value={n}>
                      {n}
                    </option>
                  ))}
                </select>
              </>
            )}
          </div>
        )}

        <SecretsEditor rows={secrets} onChange={setSecrets} />
        <ErrorNotice error={error ?? listeners.error} />
        {progress && !error && <p role="status">{progress}</p>}
        <div class="actions">
          <button type="submit" class="primary" disabled={progress !== null && error === null}>
            Create deployment
          </button>
          <a class="button" href="/deployments">
            Cancel
          </a>
        </div>
      </form>
    </>
  );
}
