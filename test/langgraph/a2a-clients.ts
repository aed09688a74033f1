/**
 * What the MCP and A2A tests (protocols.test.ts, protocols-deploy.test.ts) share: A2A messages as the
 * official client sends them, their text, and a client of an assistant's card.
 */
import { randomUUID } from 'node:crypto';
import { Role, type Message, type SendMessageRequest } from '@a2a-js/sdk';
import { ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';

/** A user's text message, in `contextId` (a new context when empty). */
export const text = (value: string, contextId = ''): SendMessageRequest => ({
  tenant: '',
  message: {
    messageId: randomUUID(),
    role: Role.ROLE_USER,
    contextId,
    taskId: '',
    parts: [{ content: { $case: 'text', value }, mediaType: 'text/plain', filename: '', metadata: {} }],
    metadata: {},
    extensions: [],
    referenceTaskIds: [],
  },
  configuration: undefined,
  metadata: {},
});

export const textOf = (message: Message | undefined) =>
  (message?.parts ?? []).map((part) => (part.content?.$case === 'text' ? part.content.value : '')).join('');

/** A client of the assistant's card: v1.0 (the SDK's default), or v0.3 (its compatibility mode). */
export async function a2aClient(
  base: string,
  assistant: string,
  options: { legacy?: boolean; fetchImpl?: typeof fetch } = {},
) {
  const fetchImpl = options.fetchImpl ?? fetch;
  const legacyCompat = { enabled: Boolean(options.legacy) };
  const factory = new ClientFactory({
    transports: [new JsonRpcTransportFactory({ fetchImpl, legacyCompat })],
    // A v0.3 client asks for the card without A2A-Version, and gets the v0.3 card.
    cardResolver: new DefaultAgentCardResolver({
      legacyCompat,
      fetchImpl: options.legacy
        ? (input, init) => {
            const headers = new Headers(init?.headers);
            headers.delete('A2A-Version');
            return fetchImpl(input, { ...init, headers });
          }
        : fetchImpl,
    }),
  });
  return factory.createFromUrl(base, `/.well-known/agent-card.json?assistant_id=${assistant}`);
}
