// The SDK's own HTTP/1.1 client over `node:net`: Node's default transport for `http:` servers.
// A warm round trip through `node:http` costs ≈ 0.15 ms of JavaScript on top of the wire (a
// `ClientRequest`, an `IncomingMessage` stream, the agent's bookkeeping, per request); this one
// writes the request in one go and parses the answer in place, ≈ 0.4 ms against ≈ 0.55 ms.
//
// What it does, and only that (the Lizard server speaks plain HTTP/1.1): requests with a body
// known in full (string, bytes) or none; answers framed by `content-length`, `chunked` or the
// connection's end; keep-alive connections per origin, idle ones closed after 4 s and never
// keeping the process alive; aborts that close the connection. Anything else — `https:`, bodies
// that are streams or Blobs — goes through `fallback` (`node:http`). It fails as `fetch` does:
// before an answer with a `TypeError('fetch failed')` whose `cause` is Node's error; in a body
// with a `TypeError('terminated')`; with the signal's reason once that aborted.

import type * as NodeNet from 'node:net';
import { perUrl, prematureClose, readerReply } from './transport.js';
import type { BodyReader, Chunk, Reply, Transport, TransportRequest } from './transport.js';

/** Idle connections are closed after this long (before the server's 10 s header-read timeout). */
const IDLE_MS = 4_000;
/** The most idle connections kept per origin. */
const MAX_IDLE = 32;
/** The longest answer head accepted (status line and headers). */
const MAX_HEAD = 64 * 1024;
/** A body's unread bytes above this pause the socket until the reader catches up. */
const HIGH_WATER = 1024 * 1024;

const CRLF2 = Buffer.from('\r\n\r\n');
/** A header name (a token) and a value without control characters other than tab. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const BAD_VALUE = /[\0\r\n]/;

/** An answer's head: status and headers (names in lower case, repeated ones joined by `, `). */
interface Head {
  status: number;
  headers: Map<string, string>;
}

/** How an answer's body ends. */
type Framing = { kind: 'none' } | { kind: 'length'; left: number } | { kind: 'chunked' } | { kind: 'close' };

/** A keep-alive connection to one origin, and the exchange on it (one at a time). */
class Conn {
  readonly socket: NodeNet.Socket;
  readonly origin: string;
  private readonly pool: Pools;
  /** The exchange in progress; `undefined` while idle. */
  ex: Exchange | undefined;
  private idleTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(socket: NodeNet.Socket, origin: string, pool: Pools) {
    this.socket = socket;
    this.origin = origin;
    this.pool = pool;
    socket.setNoDelay(true);
    socket.on('data', (b: Buffer) => {
      if (this.ex) this.ex.feed(b);
      else socket.destroy(); // bytes nobody asked for: the connection cannot be trusted
    });
    socket.on('end', () => {
      if (this.ex) this.ex.ended();
      socket.destroy();
    });
    socket.on('error', (err) => this.ex?.fail(err));
    socket.on('close', () => {
      this.pool.forget(this);
      this.ex?.fail(prematureClose());
    });
  }

  /** The exchange finished cleanly: keep the connection for the next request, or close it. */
  release(reusable: boolean): void {
    this.ex = undefined;
    if (!reusable || this.socket.destroyed || !this.pool.keep(this)) {
      this.socket.destroy();
      return;
    }
    this.socket.unref();
    this.idleTimer = setTimeout(() => this.socket.destroy(), IDLE_MS);
    (this.idleTimer as { unref?: () => unknown }).unref?.();
  }

  /** Taken from the pool for a new exchange. */
  take(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    this.socket.ref();
  }
}

/** Idle connections per origin. */
class Pools {
  private readonly idle = new Map<string, Conn[]>();

  take(origin: string): Conn | undefined {
    const list = this.idle.get(origin);
    for (let c = list?.pop(); c; c = list?.pop()) {
      if (!c.socket.destroyed && c.socket.readyState === 'open') {
        c.take();
        return c;
      }
    }
    return undefined;
  }

  keep(c: Conn): boolean {
    let list = this.idle.get(c.origin);
    if (!list) this.idle.set(c.origin, (list = []));
    if (list.length >= MAX_IDLE) return false;
    list.push(c);
    return true;
  }

  forget(c: Conn): void {
    const list = this.idle.get(c.origin);
    const i = list?.indexOf(c) ?? -1;
    if (i >= 0) list!.splice(i, 1);
  }
}

/** One request and its answer on a connection. */
class Exchange {
  private readonly conn: Conn;
  private readonly method: string;
  private readonly signal: AbortSignal | undefined;
  private readonly onHead: (r: Reply) => void;
  private readonly onFail: (err: unknown) => void;
  private state: 'head' | 'body' | 'done' | 'failed' = 'head';
  private written = false;
  private headBuf: Buffer | undefined;
  private framing: Framing = { kind: 'none' };
  /** Chunked framing: where in a chunk we are. */
  private chunk: { at: 'size' | 'data' | 'data-end' | 'trailer'; left: number; line: string } = {
    at: 'size',
    left: 0,
    line: '',
  };
  private keepAlive = true;
  /** Body bytes not read yet, and how many. */
  private queue: Buffer[] = [];
  private queued = 0;
  private bodyEnded = false;
  private failed: { err: unknown } | undefined;
  private wake: (() => void) | undefined;
  private paused = false;
  private readonly onAbort = (): void => this.abort();

  constructor(
    conn: Conn,
    method: string,
    signal: AbortSignal | undefined,
    onHead: (r: Reply) => void,
    onFail: (err: unknown) => void,
  ) {
    this.conn = conn;
    this.method = method;
    this.signal = signal;
    this.onHead = onHead;
    this.onFail = onFail;
    signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  /** The request went out whole. */
  sent(): void {
    this.written = true;
    this.maybeRelease();
  }

  feed(b: Buffer): void {
    if (this.state === 'head') {
      this.headBuf = this.headBuf ? Buffer.concat([this.headBuf, b]) : b;
      for (;;) {
        const end = this.headBuf.indexOf(CRLF2);
        if (end < 0) {
          if (this.headBuf.length > MAX_HEAD) this.fail(new Error('the answer head is too large'));
          return;
        }
        let head: Head;
        try {
          head = parseHead(this.headBuf.toString('latin1', 0, end));
        } catch (err) {
          this.fail(err);
          return;
        }
        const rest = this.headBuf.subarray(end + 4);
        this.headBuf = undefined;
        // (an interim answer, `100 Continue` and the like: the real one follows)
        if (head.status >= 100 && head.status < 200 && head.status !== 101) {
          if (rest.length === 0) return;
          this.headBuf = rest;
          continue;
        }
        this.startBody(head);
        // (`startBody` moved the state on)
        if (rest.length > 0 && (this.state as string) === 'body') this.body(rest);
        else if (rest.length > 0) this.keepAlive = false; // bytes after a body-less answer
        return;
      }
    }
    if (this.state === 'body') this.body(b);
    else this.conn.socket.destroy(); // bytes after the answer's end
  }

  private startBody(head: Head): void {
    const h = head.headers;
    const connection = h.get('connection')?.toLowerCase() ?? '';
    if (connection.split(',').some((t) => t.trim() === 'close')) this.keepAlive = false;
    const te = h.get('transfer-encoding');
    const length = h.get('content-length');
    if (this.method === 'HEAD' || head.status === 204 || head.status === 304) {
      this.framing = { kind: 'none' };
    } else if (te !== undefined) {
      if (te.toLowerCase().trim() !== 'chunked') {
        this.fail(new Error(`unsupported transfer-encoding: ${te}`));
        return;
      }
      this.framing = { kind: 'chunked' };
    } else if (length !== undefined) {
      const n = /^\d{1,15}$/.test(length.trim()) ? Number(length.trim()) : NaN;
      if (!Number.isSafeInteger(n)) {
        this.fail(new Error(`bad content-length: ${length}`));
        return;
      }
      this.framing = { kind: 'length', left: n };
    } else {
      this.framing = { kind: 'close' };
      this.keepAlive = false;
    }
    this.state = 'body';
    const reply = readerReply(head.status, this.signal, (name) => h.get(name.toLowerCase()) ?? null, () =>
      this.reader(),
    );
    if (this.framing.kind === 'none' || (this.framing.kind === 'length' && this.framing.left === 0)) {
      this.endBody();
    }
    this.onHead(reply);
  }

  private body(b: Buffer): void {
    const f = this.framing;
    if (f.kind === 'close') return this.push(b);
    if (f.kind === 'length') {
      if (b.length > f.left) {
        this.keepAlive = false; // more than the answer holds: not a connection to reuse
        b = b.subarray(0, f.left);
      }
      f.left -= b.length;
      this.push(b);
      if (f.left === 0) this.endBody();
      return;
    }
    if (f.kind === 'chunked') this.chunked(b);
  }

  /** Decode chunked framing (RFC 9112 §7.1); chunk extensions and trailers are read and dropped. */
  private chunked(b: Buffer): void {
    const c = this.chunk;
    let i = 0;
    while (i < b.length && this.state === 'body') {
      if (c.at === 'data') {
        const n = Math.min(c.left, b.length - i);
        this.push(b.subarray(i, i + n));
        i += n;
        c.left -= n;
        if (c.left === 0) c.at = 'data-end';
        continue;
      }
      // A line: the chunk's size, the CRLF after its data, or a trailer.
      const nl = b.indexOf(10, i);
      const part = b.toString('latin1', i, nl < 0 ? b.length : nl);
      i = nl < 0 ? b.length : nl + 1;
      c.line += part;
      if (c.line.length > 4096) return this.fail(new Error('bad chunked encoding: a line too long'));
      if (nl < 0) return;
      const line = c.line.endsWith('\r') ? c.line.slice(0, -1) : c.line;
      c.line = '';
      if (c.at === 'data-end') {
        if (line !== '') return this.fail(new Error('bad chunked encoding: no CRLF after a chunk'));
        c.at = 'size';
      } else if (c.at === 'size') {
        const hex = line.split(';', 1)[0]!.trim();
        if (!/^[0-9a-fA-F]{1,12}$/.test(hex)) return this.fail(new Error(`bad chunk size: ${line.slice(0, 40)}`));
        c.left = parseInt(hex, 16);
        c.at = c.left === 0 ? 'trailer' : 'data';
      } else if (line === '') {
        // (the empty line after the trailers: the body's end)
        if (i < b.length) this.keepAlive = false;
        this.endBody();
        return;
      }
    }
  }

  private push(b: Buffer): void {
    if (b.length === 0) return;
    this.queue.push(b);
    this.queued += b.length;
    if (this.queued > HIGH_WATER && !this.paused) {
      this.paused = true;
      this.conn.socket.pause();
    }
    this.poke();
  }

  private endBody(): void {
    this.bodyEnded = true;
    this.state = 'done';
    this.signal?.removeEventListener('abort', this.onAbort);
    this.poke();
    this.maybeRelease();
  }

  /** Once the answer ended and the request went out whole, the connection is free again. */
  private maybeRelease(): void {
    if (this.state !== 'done' || !this.written) return;
    if (this.paused) this.conn.socket.resume();
    this.paused = false;
    if (this.conn.ex === this) this.conn.release(this.keepAlive);
  }

  /** The server closed its side: the end of a body framed by the connection, else a failure. */
  ended(): void {
    if (this.state === 'body' && this.framing.kind === 'close') {
      this.keepAlive = false;
      this.endBody();
    } else if (this.state !== 'done') {
      this.fail(prematureClose());
    }
  }

  fail(err: unknown): void {
    if (this.state === 'done' || this.state === 'failed') return;
    const before = this.state === 'head';
    this.state = 'failed';
    this.failed = { err };
    this.signal?.removeEventListener('abort', this.onAbort);
    this.conn.socket.destroy();
    if (before) this.onFail(new TypeError('fetch failed', { cause: err }));
    this.poke();
  }

  private abort(): void {
    const reason = this.signal?.reason;
    if (this.state === 'head') {
      this.state = 'failed';
      this.conn.socket.destroy();
      this.onFail(reason);
      return;
    }
    if (this.state !== 'body') return;
    this.state = 'failed';
    this.failed = { err: reason };
    this.conn.socket.destroy();
    this.poke();
  }

  private poke(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  private reader(): BodyReader {
    const read = async (): Promise<Chunk> => {
      for (;;) {
        const b = this.queue.shift();
        if (b) {
          this.queued -= b.length;
          if (this.paused && this.queued <= HIGH_WATER / 2) {
            this.paused = false;
            this.conn.socket.resume();
          }
          return { done: false, value: b };
        }
        if (this.bodyEnded) return { done: true, value: undefined };
        if (this.failed) {
          const err = this.failed.err;
          throw this.signal?.aborted ? this.signal.reason : new TypeError('terminated', { cause: err });
        }
        await new Promise<void>((resolve) => (this.wake = resolve));
      }
    };
    return {
      read,
      // (a body read to its end leaves the connection to the pool; an unfinished one closes it)
      cancel: async () => {
        if (this.bodyEnded) return;
        this.state = 'failed';
        this.failed ??= { err: prematureClose() };
        this.signal?.removeEventListener('abort', this.onAbort);
        this.conn.socket.destroy();
        this.poke();
      },
    };
  }
}

/** Parse a status line and headers (without the blank line after them). */
function parseHead(text: string): Head {
  const lines = text.split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})(?: .*)?$/.exec(lines[0] ?? '');
  if (!m) throw new Error(`not an HTTP/1.1 answer: ${JSON.stringify((lines[0] ?? '').slice(0, 60))}`);
  const headers = new Map<string, string>();
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const colon = line.indexOf(':');
    if (colon <= 0) throw new Error(`bad header line: ${JSON.stringify(line.slice(0, 60))}`);
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    const had = headers.get(name);
    headers.set(name, had === undefined ? value : `${had}, ${value}`);
  }
  return { status: Number(m[1]), headers };
}

/**
 * The transport: HTTP/1.1 over `net` for `http:` URLs with bodies known in full, `fallback` for
 * the rest.
 */
export function netTransport(net: Pick<typeof NodeNet, 'connect'>, fallback: Transport): Transport {
  const pools = new Pools();
  const targetOf = perUrl((url) => {
    const u = new URL(url);
    const host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
    return { host, port: Number(u.port || 80), origin: u.origin, path: u.pathname + u.search, hostHeader: u.host };
  });
  return (req: TransportRequest) => {
    const { method, url, headers, body, signal } = req;
    const known = body === undefined || typeof body === 'string' || body instanceof Uint8Array || body instanceof ArrayBuffer;
    if (!known || !url.startsWith('http:')) return fallback(req);
    return new Promise<Reply>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const t = targetOf(url);
      const bytes = body instanceof ArrayBuffer ? new Uint8Array(body) : body;
      let head = `${method} ${t.path} HTTP/1.1\r\nhost: ${t.hostHeader}\r\n`;
      for (const [k, v] of Object.entries(headers)) {
        if (!TOKEN.test(k) || BAD_VALUE.test(v)) {
          return reject(new TypeError(`invalid header ${JSON.stringify(k)}`));
        }
        head += `${k}: ${v}\r\n`;
      }
      const length = bytes === undefined ? 0 : typeof bytes === 'string' ? Buffer.byteLength(bytes) : bytes.byteLength;
      if (bytes !== undefined || !['GET', 'HEAD', 'DELETE', 'OPTIONS'].includes(method)) {
        head += `content-length: ${length}\r\n`;
      }
      head += '\r\n';
      let conn = pools.take(t.origin);
      if (!conn) {
        const socket = net.connect({ host: t.host, port: t.port });
        conn = new Conn(socket, t.origin, pools);
      }
      const c = conn;
      const ex = new Exchange(c, method, signal, resolve, reject);
      c.ex = ex;
      const done = (err?: Error | null): void => {
        if (err) ex.fail(err);
        else ex.sent();
      };
      if (typeof bytes === 'string') {
        c.socket.write(head + bytes, 'utf8', done);
      } else if (bytes === undefined || bytes.byteLength === 0) {
        c.socket.write(head, 'latin1', done);
      } else {
        c.socket.cork();
        c.socket.write(head, 'latin1');
        c.socket.write(bytes, done);
        c.socket.uncork();
      }
    });
  };
}
