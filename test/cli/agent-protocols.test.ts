/**
 * The MCP and A2A addresses that `slipway deployments get` and the dashboard show for a LangGraph
 * deployment (packages/sdk/src/agent-protocols.ts), and that they show none for another app.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { agentProtocolAddresses } from '../../packages/sdk/src/agent-protocols.ts';

test('a LangGraph revision gets its MCP, A2A and agent card addresses under the stable URL', () => {
  assert.deepEqual(agentProtocolAddresses('http://graph-agent-0b9e1c2d.localhost:8125', 'apps/agent/langgraph.json'), {
    mcp: 'http://graph-agent-0b9e1c2d.localhost:8125/mcp',
    a2a: 'http://graph-agent-0b9e1c2d.localhost:8125/a2a/{assistant_id}',
    agentCard: 'http://graph-agent-0b9e1c2d.localhost:8125/.well-known/agent-card.json?assistant_id={assistant_id}',
  });
  assert.equal(
    agentProtocolAddresses('https://agents.example.com/', 'langgraph.json')?.mcp,
    'https://agents.example.com/mcp',
  );
});

test('another app, or a deployment without a stable URL yet, gets none', () => {
  assert.equal(agentProtocolAddresses('http://app.localhost:8125', 'slipway.json'), null);
  assert.equal(agentProtocolAddresses('http://app.localhost:8125', 'not-langgraph.json'), null);
  assert.equal(agentProtocolAddresses(null, 'langgraph.json'), null);
  assert.equal(agentProtocolAddresses('http://app.localhost:8125', undefined), null);
});
