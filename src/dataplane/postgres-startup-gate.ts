/**
 * Reads the first messages of a PostgreSQL connection an app opens through its database forward
 * (src/dataplane/host-forwards.ts) and lets it through only as the app's own role into the app's own
 * database. The server's own rules (the role's password, CONNECT privileges) still apply after it; the
 * gate is what holds when they do not, e.g. an operator's server that trusts every local login: the app
 * cannot even ask that server for another role or database.
 *
 * Protocol facts it relies on (PostgreSQL's "Message Flow", "Start-up"): a connection opens with an
 * untyped message (an Int32 length that counts itself, an Int32 code, a body). An SSLRequest or
 * GSSENCRequest is answered with the single byte `N` (neither is offered on the sandbox's loopback) and
 * the client sends its StartupMessage next; a CancelRequest carries only a backend's key and goes through
 * as it is; a StartupMessage is protocol 3.x followed by NUL-terminated name/value pairs and a final NUL.
 */

/** PostgreSQL's own limit on a startup packet (MAX_STARTUP_PACKET_LENGTH). */
const MAX_STARTUP_LENGTH = 10_000;
const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;
const PROTOCOL_MAJOR_3 = 3;

export interface AllowedLogin {
  user: string;
  database: string;
}

export type StartupDecision =
  /** Not a whole message yet: read more. */
  | { kind: 'incomplete' }
  /** Answer `reply` to the client, drop the first `consumed` bytes, and read on. */
  | { kind: 'answer'; reply: Buffer; consumed: number }
  /** Pass the connection through, starting with every byte read so far. */
  | { kind: 'pass' }
  /** Answer `reply` (a PostgreSQL error) and close. */
  | { kind: 'refuse'; reply: Buffer; reason: string };

/** What to do with a connection whose first bytes (after any answered requests) are `data`. */
export function decideStartup(data: Buffer, allowed: AllowedLogin): StartupDecision {
  if (data.length < 8) return { kind: 'incomplete' };
  const length = data.readInt32BE(0);
  const code = data.readInt32BE(4);
  if (length < 8 || length > MAX_STARTUP_LENGTH) return refuse('08P01', 'invalid startup packet length');
  if (data.length < length) return { kind: 'incomplete' };
  if ((code === SSL_REQUEST || code === GSSENC_REQUEST) && length === 8)
    return { kind: 'answer', reply: Buffer.from('N'), consumed: 8 };
  if (code === CANCEL_REQUEST) return { kind: 'pass' };
  if (code >>> 16 !== PROTOCOL_MAJOR_3) return refuse('08P01', 'unsupported frontend protocol');

  const parameters = new Map<string, string>();
  let at = 8;
  for (;;) {
    const nameEnd = data.indexOf(0, at);
    if (nameEnd < 0 || nameEnd >= length) return refuse('08P01', 'invalid startup packet layout');
    if (nameEnd === at) break;
    const valueEnd = data.indexOf(0, nameEnd + 1);
    if (valueEnd < 0 || valueEnd >= length) return refuse('08P01', 'invalid startup packet layout');
    const name = data.toString('utf8', at, nameEnd);
    if (parameters.has(name)) return refuse('08P01', `startup parameter "${name}" given twice`);
    parameters.set(name, data.toString('utf8', nameEnd + 1, valueEnd));
    at = valueEnd + 1;
  }
  const user = parameters.get('user');
  const database = parameters.get('database') || user;
  if (user !== allowed.user || database !== allowed.database)
    return refuse('28000', `this app may connect only as role "${allowed.user}" to database "${allowed.database}"`);
  // A replication connection is a different protocol with other privileges; an app has no use for it.
  const replication = parameters.get('replication');
  if (replication !== undefined && !['false', 'off', 'no', '0'].includes(replication.toLowerCase()))
    return refuse('28000', 'replication connections are not allowed through this forward');
  return { kind: 'pass' };
}

/** A FATAL ErrorResponse, as the server itself sends one before closing. */
function refuse(sqlstate: string, message: string): StartupDecision {
  const fields = Buffer.concat(
    [
      ['S', 'FATAL'],
      ['V', 'FATAL'],
      ['C', sqlstate],
      ['M', message],
    ]
      .map(([type, value]) => Buffer.from(`${type}${value}\0`, 'utf8'))
      .concat(Buffer.from([0])),
  );
  const header = Buffer.alloc(5);
  header.write('E', 0);
  header.writeInt32BE(fields.length + 4, 1);
  return { kind: 'refuse', reply: Buffer.concat([header, fields]), reason: message };
}
