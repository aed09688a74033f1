/**
 * A digest of an integration's API URL and credentials. Two clients with the same fingerprint talk to the
 * same host as the same identity; a changed fingerprint means changed credentials. A hash, so that maps
 * keyed by it never hold a secret in readable form.
 */
import { createHash } from 'node:crypto';
import type { CodeHostCredentials } from './github-client.ts';

export function credentialsFingerprint(apiUrl: string, credentials: CodeHostCredentials): string {
  const material =
    'app_id' in credentials
      ? ['app', apiUrl, String(credentials.app_id), String(credentials.installation_id), credentials.private_key]
      : ['token', apiUrl, credentials.token];
  return createHash('sha256').update(JSON.stringify(material)).digest('hex');
}
