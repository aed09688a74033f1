/**
 * deploy/, the kustomize base that installs the agent: it renders (`kubectl kustomize`), every object
 * is valid against the Kubernetes schemas, the RBAC grants exactly what the agent uses in the
 * namespaces it watches (and nothing cluster-wide), and the settings it gives the agent load.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { loadListenerConfig } from '@slipway/listener/config';
import { HTTP_ROUTE_KIND, MANAGED_KINDS } from '@slipway/listener/kube-objects';
import { labelProblems, schemaProblem } from './k8s-schemas.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

interface Rendered {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

function render(): Rendered[] {
  const yaml = execFileSync('kubectl', ['kustomize', path.join(ROOT, 'deploy')], { encoding: 'utf8' });
  return parseAllDocuments(yaml)
    .map((doc) => doc.toJS() as Rendered | null)
    .filter((o): o is Rendered => o !== null);
}

interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

describe('deploy/ (kustomize base)', () => {
  const objects = render();
  const of = (kind: string) => objects.filter((o) => o.kind === kind);

  test('renders namespaces, a service account, a Role and RoleBinding, the config, the credential Secret and the Deployment, all valid', () => {
    assert.deepEqual(objects.map((o) => o.kind).sort(), [
      'ConfigMap',
      'Deployment',
      'Namespace',
      'Namespace',
      'Role',
      'RoleBinding',
      'Secret',
      'ServiceAccount',
    ]);
    for (const o of objects) {
      assert.equal(schemaProblem(o), null, `${o.kind} ${o.metadata.name}`);
      assert.deepEqual(labelProblems(o.metadata.labels, `${o.kind} ${o.metadata.name}`), []);
    }
    assert.equal(of('ClusterRole').length + of('ClusterRoleBinding').length, 0, 'nothing cluster-wide');
  });

  test('the Role grants exactly what the agent does with each kind it manages, in a watched namespace', () => {
    const config = of('ConfigMap')[0]!.data as Record<string, string>;
    const watched = config.SLIPWAY_LISTENER_NAMESPACES!.split(',');
    const [role] = of('Role');
    assert.ok(watched.includes(role!.metadata.namespace!));
    const granted = new Map<string, string[]>();
    for (const rule of role!.rules as Rule[]) {
      for (const group of rule.apiGroups)
        for (const resource of rule.resources) granted.set(`${group}/${resource}`, [...rule.verbs].sort());
    }
    const needed = new Map(
      [...MANAGED_KINDS, HTTP_ROUTE_KIND].map((k) => {
        const group = k.apiVersion.includes('/') ? k.apiVersion.split('/')[0]! : '';
        const verbs =
          k.kind === 'Pod'
            ? ['list', 'watch']
            : k.kind === 'PersistentVolumeClaim'
              ? ['delete', 'list', 'watch']
              : ['create', 'delete', 'list', 'patch', 'watch'];
        return [`${group}/${k.plural}`, verbs];
      }),
    );
    assert.deepEqual(Object.fromEntries(granted), Object.fromEntries(needed));

    const [binding] = of('RoleBinding');
    const [account] = of('ServiceAccount');
    assert.equal(binding!.metadata.namespace, role!.metadata.namespace);
    assert.deepEqual(binding!.roleRef, {
      apiGroup: 'rbac.authorization.k8s.io',
      kind: 'Role',
      name: role!.metadata.name,
    });
    assert.deepEqual(binding!.subjects, [
      { kind: 'ServiceAccount', name: account!.metadata.name, namespace: account!.metadata.namespace },
    ]);
  });

  test('the Deployment runs the agent as that service account, unprivileged, with the generated config and credential', () => {
    const [deployment] = of('Deployment');
    type Spec = {
      template: {
        spec: {
          serviceAccountName: string;
          securityContext: { runAsNonRoot: boolean };
          containers: {
            envFrom: { configMapRef?: { name: string }; secretRef?: { name: string } }[];
            securityContext: { allowPrivilegeEscalation: boolean; readOnlyRootFilesystem: boolean };
          }[];
        };
      };
    };
    const pod = (deployment!.spec as Spec).template.spec;
    const [account] = of('ServiceAccount');
    assert.equal(pod.serviceAccountName, account!.metadata.name);
    assert.equal(deployment!.metadata.namespace, account!.metadata.namespace);
    assert.equal(pod.securityContext.runAsNonRoot, true);
    const container = pod.containers[0]!;
    assert.equal(container.securityContext.allowPrivilegeEscalation, false);
    assert.equal(container.securityContext.readOnlyRootFilesystem, true);
    const refs = container.envFrom.map((e) => e.configMapRef?.name ?? e.secretRef?.name);
    assert.deepEqual(
      refs.sort(),
      [of('ConfigMap')[0]!.metadata.name, of('Secret')[0]!.metadata.name].sort(),
      'the generated (hash-suffixed) names',
    );
  });

  test('the settings it gives the agent are the ones the agent reads, and load', () => {
    const env: Record<string, string> = {
      ...(of('ConfigMap')[0]!.data as Record<string, string>),
      KUBERNETES_SERVICE_HOST: '10.0.0.1',
    };
    for (const [key, value] of Object.entries(of('Secret')[0]!.data as Record<string, string>))
      env[key] = Buffer.from(value, 'base64').toString('utf8');
    const config = loadListenerConfig(env);
    assert.deepEqual(config.namespaces, ['agents']);
    assert.equal(config.kubeconfigPath, null, 'in the cluster: the service account');
  });
});
