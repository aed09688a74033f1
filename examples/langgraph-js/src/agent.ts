/**
 * A small LangGraph.js agent that needs no model key: it reads a text, plans which analyses the text
 * asks for, runs them one node visit at a time, and writes an answer. LangGraph's API server serves it
 * as the graph `agent` (langgraph.json); clients pass `{"text": "..."}` as the run's input.
 *
 * `configurable.step_delay_ms` makes every node wait that long, to watch a run stream step by step.
 * `REPLY_PREFIX` (langgraph.json's env, or a deployment secret of that name) starts the answer.
 */
import { Annotation, END, START, StateGraph, type LangGraphRunnableConfig } from '@langchain/langgraph';

const AgentState = Annotation.Root({
  text: Annotation<string>(),
  /** Analyses still to run, in order. */
  plan: Annotation<string[]>({ reducer: (_before, next) => next, default: () => [] }),
  /** One line per analysis that ran. */
  findings: Annotation<string[]>({ reducer: (all, more) => [...all, ...more], default: () => [] }),
  answer: Annotation<string>(),
});
type State = typeof AgentState.State;

const wordsOf = (text: string): string[] => text.match(/[\p{L}\p{N}']+/gu) ?? [];

/** What the agent can do, each a pure function of the text. */
const ANALYSES: Record<string, (text: string) => string> = {
  words: (text) => `${wordsOf(text).length} words`,
  longest: (text) => `the longest word is "${wordsOf(text).reduce((a, b) => (b.length > a.length ? b : a), '')}"`,
  sentences: (text) => `${text.split(/[.!?]+/).filter((s) => s.trim() !== '').length} sentence(s)`,
  shout: (text) => `shouted: ${text.toUpperCase()}`,
};

async function pace(config: LangGraphRunnableConfig): Promise<void> {
  const ms = Number(config.configurable?.step_delay_ms ?? 0);
  if (ms > 0) await new Promise((resolve) => setTimeout(resolve, Math.min(ms, 5_000)));
}

/** Picks the analyses the text mentions; every one when it mentions none. */
async function plan(state: State, config: LangGraphRunnableConfig): Promise<Partial<State>> {
  await pace(config);
  if (typeof state.text !== 'string' || state.text.trim() === '')
    throw new Error('The input needs a "text" to analyse.');
  const asked = Object.keys(ANALYSES).filter((name) => new RegExp(`\\b${name}`, 'i').test(state.text));
  return { plan: asked.length > 0 ? asked : Object.keys(ANALYSES) };
}

/** Runs the next planned analysis. */
async function analyse(state: State, config: LangGraphRunnableConfig): Promise<Partial<State>> {
  await pace(config);
  const [next, ...rest] = state.plan;
  return { plan: rest, findings: next ? [ANALYSES[next]!(state.text)] : [] };
}

async function answer(state: State, config: LangGraphRunnableConfig): Promise<Partial<State>> {
  await pace(config);
  const prefix = process.env.REPLY_PREFIX ?? 'Analysis';
  return { answer: `${prefix}: ${state.findings.join('; ')}.` };
}

// Node names may not repeat a state key: `planner` writes `plan`, `writer` writes `answer`.
export const graph = new StateGraph(AgentState)
  .addNode('planner', plan)
  .addNode('analyst', analyse)
  .addNode('writer', answer)
  .addEdge(START, 'planner')
  .addEdge('planner', 'analyst')
  .addConditionalEdges('analyst', (state: State) => (state.plan.length > 0 ? 'analyst' : 'writer'), [
    'analyst',
    'writer',
  ])
  .addEdge('writer', END)
  .compile();
graph.name = 'agent';
