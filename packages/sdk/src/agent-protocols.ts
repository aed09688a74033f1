/**
 * Where a LangGraph deployment serves MCP and A2A (docs/langgraph.md, "MCP and A2A"): under its stable
 * URL, for a revision built from a `langgraph.json`. The CLI and the dashboard show these.
 */
export interface AgentProtocolAddresses {
  /** The MCP server (Streamable HTTP): one tool per assistant. */
  readonly mcp: string;
  /** A2A JSON-RPC of an assistant (its UUID or a graph id in place of `{assistant_id}`). */
  readonly a2a: string;
  /** The assistant's agent card. */
  readonly agentCard: string;
}

/** The addresses, or null when the deployment has no stable URL yet or its revision is not a LangGraph project. */
export function agentProtocolAddresses(
  customUrl: string | null | undefined,
  frameworkConfigPath: string | null | undefined,
): AgentProtocolAddresses | null {
  if (!customUrl || !frameworkConfigPath || !/(^|\/)langgraph\.json$/.test(frameworkConfigPath)) return null;
  const base = customUrl.replace(/\/+$/, '');
  return {
    mcp: `${base}/mcp`,
    a2a: `${base}/a2a/{assistant_id}`,
    agentCard: `${base}/.well-known/agent-card.json?assistant_id={assistant_id}`,
  };
}
