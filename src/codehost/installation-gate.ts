/**
 * Keeps clients of different identities from sharing an installation-token exchange.
 *
 * Why: @octokit/auth-app (8.x, get-installation-authentication.js) shares an in-flight token exchange
 * between all its instances in the process, keyed by installation id alone. Two integrations with the
 * same installation id but another host, app or key (GitHub Enterprise Server numbers installations from
 * 1; any tenant can type any id) would get each other's token when their exchanges overlap, and send it
 * to their own host: a token leak across tenants. Every call of an App client therefore runs inside this
 * gate, which admits at once only clients of one fingerprint per installation id; clients of the same
 * fingerprint (the same integration) still run concurrently.
 *
 * Module-level on purpose, against the project's no-singleton rule: it must have exactly the scope of the
 * module-level state it guards. Remove it when auth-app keys in-flight exchanges per instance.
 */

interface Waiter {
  group: string;
  admit: () => void;
}

interface Gate {
  group: string;
  active: number;
  queue: Waiter[];
}

const gates = new Map<string, Gate>();

function enter(installationId: string, group: string): Promise<void> {
  const gate = gates.get(installationId);
  if (gate === undefined) {
    gates.set(installationId, { group, active: 1, queue: [] });
    return Promise.resolve();
  }
  // Joining only while nobody waits keeps a busy integration from starving another one.
  if (gate.group === group && gate.queue.length === 0) {
    gate.active += 1;
    return Promise.resolve();
  }
  return new Promise((admit) => gate.queue.push({ group, admit }));
}

function leave(installationId: string): void {
  const gate = gates.get(installationId);
  if (gate === undefined) return;
  gate.active -= 1;
  if (gate.active > 0) return;
  const next = gate.queue.shift();
  if (next === undefined) {
    gates.delete(installationId);
    return;
  }
  gate.group = next.group;
  gate.active = 1;
  next.admit();
  // Admit the run of waiters of the same group behind it together.
  while (gate.queue[0]?.group === gate.group) {
    gate.active += 1;
    gate.queue.shift()?.admit();
  }
}

export async function withInstallationGate<T>(
  installationId: string,
  group: string,
  run: () => Promise<T>,
): Promise<T> {
  await enter(installationId, group);
  try {
    return await run();
  } finally {
    leave(installationId);
  }
}
