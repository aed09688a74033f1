/**
 * pg-lite: a deliberately small PostgreSQL client, so that this example needs no npm packages.
 * In a real app, use `pg` (node-postgres); this file shows what it does under the hood.
 *
 * It speaks version 3 of the wire protocol (https://www.postgresql.org/docs/current/protocol.html):
 *
 *   - startup, then authentication: SCRAM-SHA-256 (what Slipway's databases use), md5 or cleartext;
 *   - queries through the extended protocol (Parse, Bind, Execute), so parameters travel apart from the
 *     SQL text and need no escaping: `query('insert into notes (text) values ($1)', [text])`;
 *   - rows come back as objects of strings (the text format), NULL as null;
 *   - an ErrorResponse becomes a thrown `PgError` with the server's message, SQLSTATE code and detail.
 *
 * One query runs at a time per connection (queries wait their turn). No TLS: use it on a private
 * network or the same host, as the Slipway data plane gives it to you.
 *
 * Usage:
 *   const db = await connect(process.env.DATABASE_URL);
 *   const { rows } = await db.query('select $1::int + 1 as n', [41]);   // rows[0].n === '42'
 *   await db.end();
 */
import { createHash, createHmac, pbkdf2, randomBytes, timingSafeEqual } from 'node:crypto';
import { EventEmitter } from 'node:events';
import net from 'node:net';
import { promisify } from 'node:util';

const pbkdf2Async = promisify(pbkdf2);

/** An error reported by the server (or a broken connection), with the server's fields when there are. */
export class PgError extends Error {
  constructor(message, fields = {}) {
    super(message);
    this.name = 'PgError';
    /** SQLSTATE, e.g. '42P01' (undefined table), '28P01' (wrong password). */
    this.code = fields.C;
    this.detail = fields.D;
    this.severity = fields.S;
  }
}

// ---------------------------------------------------------------------------------------------------
// Writing messages: a type byte, then an Int32 length that counts itself and the body, then the body.

/** Builds a message body from parts: strings (written NUL-terminated), Int16/Int32 and raw buffers. */
class Writer {
  #parts = [];
  cstring(text) {
    this.#parts.push(Buffer.from(text, 'utf8'), Buffer.alloc(1));
    return this;
  }
  int16(n) {
    const b = Buffer.alloc(2);
    b.writeInt16BE(n);
    this.#parts.push(b);
    return this;
  }
  int32(n) {
    const b = Buffer.alloc(4);
    b.writeInt32BE(n);
    this.#parts.push(b);
    return this;
  }
  bytes(buffer) {
    this.#parts.push(buffer);
    return this;
  }
  /** The message with its type byte; `type` null for the startup message, which has none. */
  message(type) {
    const body = Buffer.concat(this.#parts);
    const length = Buffer.alloc(4);
    length.writeInt32BE(body.length + 4);
    return type === null ? Buffer.concat([length, body]) : Buffer.concat([Buffer.from(type, 'ascii'), length, body]);
  }
}

// ---------------------------------------------------------------------------------------------------
// Reading messages.

/** Reads the fields of one message body in order. */
class Reader {
  constructor(body) {
    this.body = body;
    this.at = 0;
  }
  int16() {
    const n = this.body.readInt16BE(this.at);
    this.at += 2;
    return n;
  }
  int32() {
    const n = this.body.readInt32BE(this.at);
    this.at += 4;
    return n;
  }
  cstring() {
    const end = this.body.indexOf(0, this.at);
    const text = this.body.toString('utf8', this.at, end);
    this.at = end + 1;
    return text;
  }
  bytes(n) {
    const out = this.body.subarray(this.at, this.at + n);
    this.at += n;
    return out;
  }
  rest() {
    return this.bytes(this.body.length - this.at);
  }
}

/** ErrorResponse and NoticeResponse bodies: (field type byte, string) pairs, ended by a zero byte. */
function errorFields(body) {
  const reader = new Reader(body);
  const fields = {};
  while (reader.at < body.length && body[reader.at] !== 0) {
    const type = String.fromCharCode(body[reader.at]);
    reader.at += 1;
    fields[type] = reader.cstring();
  }
  return fields;
}

// ---------------------------------------------------------------------------------------------------
// SCRAM-SHA-256 (RFC 5802 and RFC 7677), the password exchange PostgreSQL prefers: the password never
// crosses the wire, and the server proves it knows the password too.

const hmac = (key, text) => createHmac('sha256', key).update(text).digest();
const sha256 = (data) => createHash('sha256').update(data).digest();
const xor = (a, b) => Buffer.from(a.map((byte, i) => byte ^ b[i]));

/** `,` and `=` are the only characters SCRAM escapes in a user name. */
const saslName = (name) => name.replaceAll('=', '=3D').replaceAll(',', '=2C');

/** Parses `k=v,k=v` SCRAM attributes. */
function scramAttributes(text) {
  const out = {};
  for (const part of text.split(',')) {
    const eq = part.indexOf('=');
    if (eq > 0) out[part.slice(0, eq)] = part.slice(eq + 1);
  }
  return out;
}

/**
 * One SCRAM-SHA-256 exchange, as three steps: `clientFirst`, then `clientFinal(serverFirst)`, then
 * `verifyServerFinal(serverFinal)`. PostgreSQL takes the user from the startup message and ignores
 * the one here, so it is sent empty (as libpq does); `user` and `nonce` are parameters for tests.
 */
export function scramSession(password, { user = '', nonce = randomBytes(18).toString('base64') } = {}) {
  // SASLprep, approximately: NFKC is its main step, and for ASCII passwords it changes nothing.
  const secret = password.normalize('NFKC');
  const clientFirstBare = `n=${saslName(user)},r=${nonce}`;
  let expectedServerSignature = null;
  return {
    // 'n,,' means: no channel binding, no authorization identity.
    clientFirst: `n,,${clientFirstBare}`,

    async clientFinal(serverFirst) {
      const { r: serverNonce, s: salt, i: iterations } = scramAttributes(serverFirst);
      if (!serverNonce?.startsWith(nonce) || serverNonce.length === nonce.length)
        throw new PgError('SCRAM: the server nonce does not extend ours');
      if (!salt || !/^\d+$/.test(iterations ?? ''))
        throw new PgError('SCRAM: the server sent no salt or iteration count');
      const saltedPassword = await pbkdf2Async(secret, Buffer.from(salt, 'base64'), Number(iterations), 32, 'sha256');
      const clientKey = hmac(saltedPassword, 'Client Key');
      const storedKey = sha256(clientKey);
      // 'biws' is base64 of the 'n,,' header above, echoed back.
      const withoutProof = `c=biws,r=${serverNonce}`;
      const authMessage = `${clientFirstBare},${serverFirst},${withoutProof}`;
      const proof = xor(clientKey, hmac(storedKey, authMessage));
      expectedServerSignature = hmac(hmac(saltedPassword, 'Server Key'), authMessage);
      return `${withoutProof},p=${proof.toString('base64')}`;
    },

    verifyServerFinal(serverFinal) {
      const { v, e } = scramAttributes(serverFinal);
      if (e) throw new PgError(`SCRAM: the server refused: ${e}`);
      const signature = Buffer.from(v ?? '', 'base64');
      if (
        !expectedServerSignature ||
        signature.length !== expectedServerSignature.length ||
        !timingSafeEqual(signature, expectedServerSignature)
      ) {
        throw new PgError('SCRAM: the server could not prove it knows the password');
      }
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// The connection.

/** Host, port, user, password and database of a postgres:// URL. */
function parseUrl(url) {
  const u = new URL(url);
  if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:')
    throw new PgError(`not a postgres:// URL: ${u.protocol}`);
  const sslmode = u.searchParams.get('sslmode');
  if (sslmode && !['disable', 'allow', 'prefer'].includes(sslmode))
    throw new PgError(`pg-lite does not speak TLS (sslmode=${sslmode})`);
  const user = decodeURIComponent(u.username) || 'postgres';
  return {
    host: u.hostname.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1',
    port: Number(u.port || 5432),
    user,
    password: decodeURIComponent(u.password),
    database: decodeURIComponent(u.pathname.slice(1)) || user,
  };
}

/**
 * A connection. Emits 'close' when the connection ends, whether by `end()` or because the server or the
 * network dropped it (then with the error), so that an app can reconnect.
 */
export class Client extends EventEmitter {
  #socket;
  #buffer = Buffer.alloc(0);
  #wake = null;
  #closed = null;
  #queue = Promise.resolve();
  #ending = false;

  /** The authentication the server asked for: 'scram-sha-256', 'md5', 'cleartext' or 'trust'. */
  authMethod = null;
  /** Server settings it reported (server_version, TimeZone, ...). */
  parameters = {};

  constructor(socket) {
    super();
    this.#socket = socket;
    socket.on('data', (chunk) => {
      this.#buffer = this.#buffer.length === 0 ? chunk : Buffer.concat([this.#buffer, chunk]);
      this.#wake?.();
    });
    socket.on('error', (error) => this.#close(new PgError(`connection error: ${error.message}`)));
    socket.on('close', () => this.#close(this.#ending ? null : new PgError('the server closed the connection')));
  }

  #close(error) {
    if (this.#closed) return;
    this.#closed = error ?? new PgError('the connection is closed');
    this.#wake?.();
    this.emit('close', error);
  }

  get closed() {
    return this.#closed !== null;
  }

  /** The next message from the server, waiting for it to arrive. Skips the ones that may come at any time. */
  async #read() {
    for (;;) {
      if (this.#buffer.length >= 5) {
        const length = this.#buffer.readInt32BE(1);
        if (this.#buffer.length >= length + 1) {
          const type = String.fromCharCode(this.#buffer[0]);
          const body = this.#buffer.subarray(5, length + 1);
          this.#buffer = this.#buffer.subarray(length + 1);
          if (type === 'N' || type === 'A') continue; // notices and notifications: not needed here
          if (type === 'S') {
            const reader = new Reader(body);
            this.parameters[reader.cstring()] = reader.cstring();
            continue;
          }
          return { type, body };
        }
      }
      if (this.#closed) throw this.#closed;
      await new Promise((resolve) => (this.#wake = resolve));
      this.#wake = null;
    }
  }

  #send(buffer) {
    if (this.#closed) throw this.#closed;
    this.#socket.write(buffer);
  }

  /** Startup and authentication, up to the first ReadyForQuery. */
  async startup({ user, password, database }) {
    const startup = new Writer()
      .int32(196608) // protocol 3.0
      .cstring('user')
      .cstring(user)
      .cstring('database')
      .cstring(database)
      .cstring('client_encoding')
      .cstring('UTF8')
      .cstring('application_name')
      .cstring('slipway-example-agent')
      .bytes(Buffer.alloc(1))
      .message(null);
    this.#send(startup);
    let scram = null;
    for (;;) {
      const { type, body } = await this.#read();
      if (type === 'E') {
        const fields = errorFields(body);
        throw new PgError(fields.M ?? 'startup failed', fields);
      }
      if (type === 'Z') return; // ReadyForQuery: we are in
      if (type !== 'R') continue; // BackendKeyData ('K') and others we do not need
      const reader = new Reader(body);
      const code = reader.int32();
      switch (code) {
        case 0: // AuthenticationOk
          this.authMethod ??= 'trust';
          break;
        case 3: // AuthenticationCleartextPassword
          this.authMethod = 'cleartext';
          this.#send(new Writer().cstring(password).message('p'));
          break;
        case 5: {
          // AuthenticationMD5Password: 'md5' + md5(md5(password + user) + salt)
          this.authMethod = 'md5';
          const salt = reader.bytes(4);
          const inner = createHash('md5')
            .update(password + user)
            .digest('hex');
          const outer = createHash('md5')
            .update(Buffer.concat([Buffer.from(inner), salt]))
            .digest('hex');
          this.#send(new Writer().cstring(`md5${outer}`).message('p'));
          break;
        }
        case 10: {
          // AuthenticationSASL: the mechanisms the server offers, NUL-terminated, ended by an empty one
          const mechanisms = [];
          for (let m = reader.cstring(); m !== ''; m = reader.cstring()) mechanisms.push(m);
          if (!mechanisms.includes('SCRAM-SHA-256'))
            throw new PgError(`no supported SASL mechanism among ${mechanisms.join(', ')}`);
          this.authMethod = 'scram-sha-256';
          scram = scramSession(password);
          const first = Buffer.from(scram.clientFirst, 'utf8');
          this.#send(new Writer().cstring('SCRAM-SHA-256').int32(first.length).bytes(first).message('p'));
          break;
        }
        case 11: // AuthenticationSASLContinue: the server-first message
          this.#send(
            new Writer()
              .bytes(Buffer.from(await scram.clientFinal(reader.rest().toString('utf8')), 'utf8'))
              .message('p'),
          );
          break;
        case 12: // AuthenticationSASLFinal: the server's proof
          scram.verifyServerFinal(reader.rest().toString('utf8'));
          break;
        default:
          throw new PgError(`unsupported authentication request ${code}`);
      }
    }
  }

  /**
   * Runs one statement with optional parameters ($1, $2, ...; values are sent as text: strings,
   * numbers, booleans, or null). Resolves to `{ rows, command }`, `rows` being objects of strings.
   */
  query(sql, params = []) {
    const run = this.#queue.then(() => this.#run(sql, params));
    // The next query waits for this one, failed or not.
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #run(sql, params) {
    const bind = new Writer().cstring('').cstring('').int16(0).int16(params.length);
    for (const value of params) {
      if (value === null || value === undefined) bind.int32(-1);
      else {
        const bytes = Buffer.from(String(value), 'utf8');
        bind.int32(bytes.length).bytes(bytes);
      }
    }
    bind.int16(0); // every result column in the text format
    // Unnamed statement and portal; Sync ends the round so the server reports ReadyForQuery, error or not.
    this.#send(
      Buffer.concat([
        new Writer().cstring('').cstring(sql).int16(0).message('P'),
        bind.message('B'),
        new Writer().bytes(Buffer.from('P')).cstring('').message('D'),
        new Writer().cstring('').int32(0).message('E'),
        new Writer().message('S'),
      ]),
    );
    let columns = [];
    const rows = [];
    let command = null;
    let error = null;
    for (;;) {
      const { type, body } = await this.#read();
      switch (type) {
        case 'T': {
          // RowDescription: per column its name, then six numbers we do not need
          const reader = new Reader(body);
          columns = Array.from({ length: reader.int16() }, () => {
            const name = reader.cstring();
            reader.bytes(18);
            return name;
          });
          break;
        }
        case 'D': {
          // DataRow: per column an Int32 length (-1 for NULL), then the text
          const reader = new Reader(body);
          const count = reader.int16();
          const row = {};
          for (let i = 0; i < count; i++) {
            const length = reader.int32();
            row[columns[i]] = length === -1 ? null : reader.bytes(length).toString('utf8');
          }
          rows.push(row);
          break;
        }
        case 'C': // CommandComplete, e.g. 'INSERT 0 1'
          command = new Reader(body).cstring();
          break;
        case 'E': {
          const fields = errorFields(body);
          error = new PgError(fields.M ?? 'query failed', fields);
          break; // keep reading: the server still sends ReadyForQuery
        }
        case 'Z':
          if (error) throw error;
          return { rows, command };
        default: // ParseComplete, BindComplete, NoData, EmptyQueryResponse
          break;
      }
    }
  }

  /** Says goodbye (Terminate) after the queries already asked for, then closes the socket. */
  async end() {
    await this.#queue;
    if (this.#closed) return;
    this.#ending = true;
    const closed = new Promise((resolve) => this.#socket.once('close', resolve));
    this.#socket.end(new Writer().message('X'));
    await closed;
  }
}

/** Opens a connection to a postgres:// URL and logs in. */
export async function connect(url, { timeoutMs = 10_000 } = {}) {
  const target = parseUrl(url);
  const socket = net.connect({ host: target.host, port: target.port });
  socket.setNoDelay(true);
  const timer = setTimeout(
    () => socket.destroy(new Error(`no answer from ${target.host}:${target.port} in ${timeoutMs} ms`)),
    timeoutMs,
  );
  try {
    await new Promise((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    const client = new Client(socket);
    await client.startup(target);
    return client;
  } catch (error) {
    socket.destroy();
    throw error instanceof PgError
      ? error
      : new PgError(`cannot connect to ${target.host}:${target.port}: ${error.message}`);
  } finally {
    clearTimeout(timer);
  }
}
