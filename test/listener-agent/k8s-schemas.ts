/**
 * Validation of Kubernetes objects against the upstream OpenAPI schemas, through kubernetes-models:
 * used on every manifest the agent builds, on every object of deploy/, and by the fake API server,
 * which refuses (422) what a real one would refuse for its schema. HTTPRoute's schema is the Gateway API's
 * own: @kubernetes-models/gateway-api is generated from the official Gateway API CRDs
 * (gateway.networking.k8s.io/v1, its openAPIV3Schema), as kubernetes-models is from Kubernetes' OpenAPI; its
 * 0.5 line, whose releases run on Node 20 like the rest of the project (2.x asks for Node 22).
 */
import { HTTPRoute } from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute';
import { Deployment } from 'kubernetes-models/apps/v1/Deployment';
import { StatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import { Role } from 'kubernetes-models/rbac.authorization.k8s.io/v1/Role';
import { RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Namespace } from 'kubernetes-models/v1/Namespace';
import { PersistentVolumeClaim } from 'kubernetes-models/v1/PersistentVolumeClaim';
import { Pod } from 'kubernetes-models/v1/Pod';
import { Secret } from 'kubernetes-models/v1/Secret';
import { Service } from 'kubernetes-models/v1/Service';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';

interface Validatable {
  validate(): void;
}
type ModelClass = new (data: never) => Validatable;

const MODELS: Readonly<Record<string, ModelClass>> = {
  'apps/v1/Deployment': Deployment,
  'apps/v1/StatefulSet': StatefulSet,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'gateway.networking.k8s.io/v1/HTTPRoute': HTTPRoute,
  'rbac.authorization.k8s.io/v1/Role': Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding,
  'v1/ConfigMap': ConfigMap,
  'v1/Namespace': Namespace,
  'v1/PersistentVolumeClaim': PersistentVolumeClaim,
  'v1/Pod': Pod,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'v1/ServiceAccount': ServiceAccount,
};

/** The schema's complaint about `object`, or null when it is valid. Throws for a kind it does not know. */
export function schemaProblem(object: { apiVersion?: unknown; kind?: unknown }): string | null {
  const Model = MODELS[`${String(object.apiVersion)}/${String(object.kind)}`];
  if (!Model) throw new Error(`no schema for ${String(object.apiVersion)} ${String(object.kind)}`);
  try {
    new Model(structuredClone(object) as never).validate();
    return null;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Label keys and values as the API server checks them (the OpenAPI schema does not). */
export function labelProblems(labels: Readonly<Record<string, string>> | undefined, where: string): string[] {
  const problems: string[] = [];
  for (const [key, value] of Object.entries(labels ?? {})) {
    const slash = key.lastIndexOf('/');
    const prefix = slash >= 0 ? key.slice(0, slash) : null;
    const name = slash >= 0 ? key.slice(slash + 1) : key;
    if (
      (prefix !== null && (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) ||
      name.length > 63 ||
      !LABEL_NAME.test(name)
    )
      problems.push(`${where}: Invalid value: "${key}": not a valid label key`);
    if (value.length > 63 || !LABEL_VALUE.test(value))
      problems.push(`${where}: Invalid value: "${value}": not a valid label value`);
  }
  return problems;
}
