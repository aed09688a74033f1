/**
 * `POST /v1/integrations/forge/codehost/{integration_id}/webhooks`: push webhooks from the code host.
 * No API key: the signature is the authentication, and it is over the raw bytes of the body, so this
 * route lives in its own plugin whose JSON parser keeps the body as a Buffer (a parsed and re-serialized
 * body would not match the signature). The plugin is encapsulated: every other route keeps the JSON
 * parser of the application.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { Uuid, errorResponses } from '../http/schema-helpers.ts';
import type { WebhookService } from '../service/codehost-webhooks.ts';
import { Delivery, deliveryResponse } from './codehost-deliveries.ts';
import { needs } from '../http/route-needs.ts';

export interface CodehostWebhookRouteDeps {
  webhooks: WebhookService;
}

export const codehostWebhookRoutes: FastifyPluginAsyncTypebox<CodehostWebhookRouteDeps> = async (app, { webhooks }) => {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

  app.post(
    '/v1/integrations/forge/codehost/:integration_id/webhooks',
    {
      config: needs({ auth: 'none' }),
      // GitHub sends push payloads of up to 25 MB; the global JSON limit (1 MiB by default) would refuse them.
      bodyLimit: 25 * 1024 * 1024,
      schema: {
        operationId: 'receiveCodehostWebhook',
        tags: ['codehost'],
        summary: 'Receive a code-host webhook delivery',
        description:
          'Called by the code host, not by users: no API key; the body must be signed with ' +
          "the integration's webhook secret in X-Hub-Signature-256 (sha256=HMAC-SHA256 of the " +
          'raw body). Content type application/json. A push to a branch tracked by a build_on_push ' +
          'codehost deployment creates one revision of it; a pull_request (opened, synchronize, reopened) builds ' +
          'a preview of its head commit at the endpoint pr-<number>, and closed removes it; a redelivery ' +
          '(same X-GitHub-Delivery) builds nothing new.',
        security: [],
        params: Type.Object({ integration_id: Uuid() }),
        response: { 200: Delivery, ...errorResponses(400, 401, 404, 413, 415, 422) },
      },
    },
    async (request) => {
      const body = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
      const row = await webhooks.receive({
        integrationId: request.params.integration_id,
        body,
        signature: request.headers['x-hub-signature-256'],
        event: request.headers['x-github-event'],
        deliveryId: request.headers['x-github-delivery'],
      });
      return deliveryResponse(row);
    },
  );
};
