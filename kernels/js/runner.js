'use strict';
/*
 * Lizard JavaScript kernel runner (Node >= 20, CommonJS, no build step).
 *
 * What it does: speaks the runner protocol of ../PROTOCOL.md. It reads `exec` control lines (JSON
 * Lines) from the fd named by LIZARD_CONTROL_FD, runs each cell in the main V8 context with
 * `vm.Script#runInThisContext` (so `require`, `process`, `Buffer` and timers are the normal globals)
 * and writes `ready` / `result` / `error` / `done` event lines to the fd named by LIZARD_EVENT_FD.
 * User output goes, unframed, to fds 1 and 2 (made blocking so that every write is in the pipe
 * before the next event line).
 *
 * Cells are parsed with acorn and only their top-level statements are rewritten, so that state
 * persists across cells and can be redeclared (text is spliced by node ranges; the line count is kept):
 *   let/const/var <patterns>        -> void (<patterns> = ...);          (names pre-created as globals)
 *   class A {...}                    -> A = class A {...};
 *   function f() {...}               -> unchanged (a script-level function is already a global; in an
 *                                       async cell `this.f = f;` is hoisted to the top of the wrapper)
 *   import d, {a as b} from 'm'      -> void ({default: d, a: b} = await <import('m')>);
 *   import * as ns from 'm' / 'm'    -> void (ns = await <import('m')>); / void (await <import('m')>);
 * where <import('m')> is `__lizard.imp(import('m'), 'm')`: ESM resolution from the cwd, falling back to
 * require.resolve (cwd node_modules, NODE_PATH) for bare names. Imports run in statement order.
 * A cell with top-level `await` / `for await` / `import` runs as `(async () => { ... })()` with its last
 * expression statement returned; other cells run synchronously and the completion value of a final
 * expression statement is the cell's result. `var`s nested in blocks of an async cell become globals too.
 *
 * Rich output: the global `display(value[, metadata])` emits a `result` (main: false) at once: a plain
 * object whose keys are all MIME types is sent as the bundle, anything else as util.inspect text.
 * `display.html/markdown/svg/png/jpeg/json/latex/text(x)` emit a one-type bundle and return it (png/jpeg
 * take a Buffer or base64; text types take a string or UTF-8 bytes); `display.bundle(data)` only builds
 * one. A bundle that is the cell's last value is the main result, unless this cell already displayed
 * it. Bundles always carry a `text/plain` fallback. display() from background code (timers) lands in
 * whichever cell is running then, or as plain text on stdout when idle.
 *
 * TypeScript: a cell that does not parse as JavaScript but is TypeScript runs with its types stripped
 * (Node's `module.stripTypeScriptTypes`, strip-only: no enums or namespaces); valid JavaScript is
 * never changed.
 *
 * What it does not do: no JSX, no TypeScript type checking, no `export`, no live ESM bindings (imports are snapshots,
 * not hoisted), `const` is not enforced across cells, no completion/inspection requests, no stdin.
 * Code that busy-loops after an `await` or in a timer / microtask cannot be interrupted by SIGINT (the
 * agent's SIGKILL fallback covers it). Errors from timers or unhandled rejections are printed to
 * stderr, never attributed to a cell.
 */

const fs = require('fs');
const vm = require('vm');
const util = require('util');
const path = require('path');
const { createRequire } = require('module');

const RUNNER_FILE = __filename;

// ---------------------------------------------------------------------------------------------
// File descriptors

function fdFromEnv(name, fallback) {
  const raw = process.env[name];
  delete process.env[name]; // user code and its subprocesses do not need to see it
  if (raw === undefined || raw === '') return fallback;
  const fd = Number(raw);
  if (!Number.isInteger(fd) || fd < 0) throw new Error(`invalid ${name}: ${raw}`);
  return fd;
}

// Node has no fcntl() to set FD_CLOEXEC, but every fd it opens is O_CLOEXEC: reopen a pipe through
// /proc (a fresh description of the same pipe) and close the inherited fd, so that subprocesses
// started by user code never hold the protocol fds. Anything else (a socket, no /proc) is kept as is.
function privateFd(fd, flags) {
  try {
    if (!fs.fstatSync(fd).isFIFO()) return fd;
    const copy = fs.openSync(`/proc/self/fd/${fd}`, flags);
    fs.closeSync(fd);
    return copy;
  } catch {
    return fd;
  }
}

// A zygote (../PROTOCOL.md, "The zygotes"; ./zygote.js) is started with only its fork socket: the
// kernels it forks get their protocol fds (and stdout/stderr) from the fork request, so nothing below
// touches fds 1-4 or process.stdout/stderr until `attachStdio` runs in the kernel.
const ZYGOTE_FD = fdFromEnv('LIZARD_ZYGOTE_FD', null);
let EVENT_FD = ZYGOTE_FD === null ? privateFd(fdFromEnv('LIZARD_EVENT_FD', 3), fs.constants.O_WRONLY) : -1;
let CONTROL_FD = ZYGOTE_FD === null
  ? privateFd(fdFromEnv('LIZARD_CONTROL_FD', 4), fs.constants.O_RDONLY | fs.constants.O_NONBLOCK)
  : -1;

// ---------------------------------------------------------------------------------------------
// Events (fd 3)

const sleepCell = new Int32Array(new SharedArrayBuffer(4));
const LONE_SURROGATE = /(?<=(?:^|[^\\])(?:\\\\)*)\\ud[89a-f][0-9a-f]{2}/g;
let pendingEvents = null; // event lines waiting for stdout/stderr to drain (rare, see sendEvent)

function writeAll(fd, buf) {
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code === 'EAGAIN') { Atomics.wait(sleepCell, 0, 0, 1); continue; }
      if (e.code === 'EPIPE') process.exit(0); // the agent is gone
      throw e;
    }
  }
}

function unflushed() {
  return (process.stdout.writableLength || 0) + (process.stderr.writableLength || 0) > 0;
}

function sendEvent(obj) {
  let line = JSON.stringify(obj);
  // JSON.stringify escapes lone surrogates as \udXXX, which strict UTF-8 JSON readers reject.
  if (line.includes('\\ud')) line = line.replace(LONE_SURROGATE, '\\ufffd');
  line += '\n';
  // stdout/stderr are blocking, so normally nothing is queued; if user code left data in a stream
  // buffer anyway (e.g. a signal cut a blocking write short), the events wait until it is written.
  if (pendingEvents || unflushed()) {
    if (!pendingEvents) { pendingEvents = []; setImmediate(flushPending); }
    pendingEvents.push(line);
    return;
  }
  writeAll(EVENT_FD, Buffer.from(line, 'utf8'));
}

const { StringDecoder } = require('string_decoder');

function attachStdio() {
  // Node writes to a pipe synchronously only until the pipe is full, then it queues in memory.
  // Blocking fds make every write complete before the next statement (and keep the ordering rule of
  // the protocol); they are also what subprocesses inheriting fds 1/2 expect.
  for (const stream of [process.stdout, process.stderr]) {
    try {
      if (stream._handle && typeof stream._handle.setBlocking === 'function') stream._handle.setBlocking(true);
    } catch { /* not a pipe/tty handle: file writes are synchronous anyway */ }
  }
  // process.stdout/stderr writes (console.log, console.error, ...) become `stdout`/`stderr` events, so
  // they are ordered exactly with results and errors (PROTOCOL.md, "Ordering rule"). Subprocesses that
  // inherit fds 1/2 still write to the real pipes.
  for (const [stream, kind] of [[process.stdout, 'stdout'], [process.stderr, 'stderr']]) {
    const decoder = new StringDecoder('utf8');
    stream.write = function write(chunk, encoding, callback) {
      if (typeof encoding === 'function') { callback = encoding; encoding = undefined; }
      let text;
      if (typeof chunk === 'string') text = chunk;
      else if (chunk instanceof Uint8Array) text = decoder.write(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      else text = String(chunk);
      if (typeof chunk === 'string' && encoding && encoding !== 'utf8' && encoding !== 'utf-8') {
        text = decoder.write(Buffer.from(chunk, encoding));
      }
      if (text) sendEvent({ ev: kind, text });
      if (typeof callback === 'function') process.nextTick(callback);
      return true;
    };
  }
}

function flushPending() {
  if (unflushed()) { setTimeout(flushPending, 1); return; }
  const lines = pendingEvents;
  pendingEvents = null;
  writeAll(EVENT_FD, Buffer.from(lines.join(''), 'utf8'));
}

// ---------------------------------------------------------------------------------------------
// Formatting values and errors

const ANSI = /\x1b\[[0-9;?]*[ -\/]*[@-~]/g;

function inspect(value) {
  try {
    const text = util.inspect(value);
    return text.includes('    at ') ? cleanStack(text).join('\n') : text;
  } catch (e) {
    let why;
    try { why = String(e && e.message); } catch { why = 'unknown error'; }
    return `[value could not be inspected: ${why}]`;
  }
}

function safeString(v, fallback) {
  try { return v === undefined ? fallback : String(v); } catch { return fallback; }
}

// obj[key] for objects whose getters may throw (user errors can be anything)
function prop(obj, key) {
  try { return obj[key]; } catch { return undefined; }
}

function isError(v) {
  return util.types.isNativeError(v) || v instanceof Error;
}

function isRunnerFrame(line) {
  return line.includes(RUNNER_FILE) || line.includes('node:vm:') || line.includes('node:internal/vm');
}

const FRAME_RE = /^\s+(?:at |\.\.\. \d+ lines matching cause stack trace \.\.\.$)/;

// Remove the frames that belong to the runner from a stack (or from any text holding stacks, such as
// util.inspect output): in each run of frame lines, what comes below the outermost cell frame is the
// runner calling into the cell, and runner frames above it (e.g. display helpers) are dropped too.
// `hidden` is an optional cell frame prefix to drop as well (the call of an async cell's wrapper);
// `hidden === true` drops all frames (errors raised while compiling a cell are all runner frames).
function cleanStack(text, hidden) {
  const lines = text.replace(ANSI, '').split(/\r?\n/);
  const out = [];
  for (let i = 0; i < lines.length;) {
    if (!FRAME_RE.test(lines[i])) { out.push(lines[i++]); continue; }
    let j = i;
    let lastCell = -1;
    for (; j < lines.length && FRAME_RE.test(lines[j]); j++) if (lines[j].includes('<cell-')) lastCell = j;
    for (let k = i; k < j; k++) {
      if (hidden === true || (lastCell >= 0 && k > lastCell)) break;
      if (isRunnerFrame(lines[k])) continue;
      if (typeof hidden === 'string' && lines[k].trimStart().startsWith(hidden)) continue;
      out.push(lines[k]);
    }
    i = j;
  }
  while (out.length > 1 && out[out.length - 1] === '') out.pop();
  return out;
}

function errorTraceback(err, hidden, depth = 0, seen = new Set()) {
  let lines;
  if (isError(err)) {
    const stack = safeString(prop(err, 'stack'), '');
    lines = stack ? cleanStack(stack, hidden) : [];
    if (!lines.length || !lines[0]) lines = [`${errorName(err)}: ${safeString(prop(err, 'message'), '')}`];
    seen.add(err);
    const cause = prop(err, 'cause');
    if (cause !== undefined && depth < 4 && !seen.has(cause)) {
      const sub = errorTraceback(cause, hidden, depth + 1, seen);
      lines.push(`Caused by: ${sub[0]}`, ...sub.slice(1));
    }
  } else {
    lines = inspect(err).replace(ANSI, '').split('\n');
  }
  return lines;
}

function errorName(err) {
  const name = safeString(prop(err, 'name'), 'Error');
  const ctor = prop(prop(err, 'constructor') || {}, 'name');
  return name === 'Error' && typeof ctor === 'string' && ctor && ctor !== 'Error' ? ctor : name;
}

function errorEvent(id, err, hidden) {
  if (isError(err)) {
    return {
      ev: 'error', id, name: errorName(err),
      value: safeString(prop(err, 'message'), '').replace(ANSI, ''),
      traceback: errorTraceback(err, hidden),
    };
  }
  const text = inspect(err).replace(ANSI, '');
  return { ev: 'error', id, name: 'Error', value: text, traceback: [`Uncaught ${text}`] };
}

// ---------------------------------------------------------------------------------------------
// display()

const MIME_RE = /^[a-z0-9][a-z0-9!#$&^_.+-]*\/[a-z0-9][a-z0-9!#$&^_.+-]*$/i;
const shownIn = new WeakMap(); // DisplayBundle -> run token in which it was last emitted

class DisplayBundle {
  constructor(data, metadata) {
    this.data = data;
    this.metadata = metadata;
  }
  [util.inspect.custom]() {
    return this.data['text/plain'];
  }
}

function isJsonMime(mime) {
  return mime === 'application/json' || mime.endsWith('+json');
}

function isBinary(v) {
  return Buffer.isBuffer(v) || ArrayBuffer.isView(v) || v instanceof ArrayBuffer;
}

function bytesOf(v) {
  if (Buffer.isBuffer(v)) return v;
  if (ArrayBuffer.isView(v)) return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  return Buffer.from(v); // ArrayBuffer
}

// Binary payloads: bytes become base64; a string is taken as base64 already (a data: URL prefix is cut).
function toBase64(v) {
  if (isBinary(v)) return bytesOf(v).toString('base64');
  const s = String(v);
  const comma = s.startsWith('data:') ? s.indexOf(',') : -1;
  return (comma >= 0 ? s.slice(comma + 1) : s).replace(/\s+/g, '');
}

function toText(v) {
  return isBinary(v) ? bytesOf(v).toString('utf8') : String(v);
}

function isTextMime(mime) {
  return mime.startsWith('text/') || mime.endsWith('+xml') || mime === 'application/javascript';
}

function jsonValue(v) {
  const s = JSON.stringify(v);
  return s === undefined ? null : JSON.parse(s);
}

const PLACEHOLDERS = {
  'text/html': '<HTML>', 'text/markdown': '<Markdown>', 'image/svg+xml': '<SVG image>',
  'image/png': '<PNG image>', 'image/jpeg': '<JPEG image>', 'image/gif': '<GIF image>',
  'text/latex': '<LaTeX>', 'application/json': '<JSON>',
};

function isPlainObject(v) {
  if (v === null || typeof v !== 'object') return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

function meta(metadata) {
  return isPlainObject(metadata) ? jsonValue(metadata) : {};
}

function isMimeBundle(v) {
  if (!isPlainObject(v)) return false;
  const keys = Object.keys(v);
  return keys.length > 0 && keys.every((k) => MIME_RE.test(k));
}

function makeBundle(raw, metadata) {
  const data = {};
  for (const mime of Object.keys(raw)) {
    const v = raw[mime];
    if (isJsonMime(mime)) data[mime] = jsonValue(v);
    else if (typeof v === 'string') data[mime] = v;
    else if (isTextMime(mime) || !isBinary(v)) data[mime] = toText(v);
    else data[mime] = toBase64(v);
  }
  if (typeof data['text/plain'] !== 'string') {
    const first = Object.keys(data).find((k) => k !== 'text/plain');
    data['text/plain'] = PLACEHOLDERS[first] || `<${first}>`;
  }
  return new DisplayBundle(data, meta(metadata));
}

function toBundle(value, metadata) {
  if (value instanceof DisplayBundle) {
    return metadata === undefined ? value : new DisplayBundle(value.data, meta(metadata));
  }
  if (isMimeBundle(value)) return makeBundle(value, metadata);
  return new DisplayBundle({ 'text/plain': inspect(value) }, meta(metadata));
}

function show(bundle) {
  const run = current;
  if (run && !run.finished) {
    shownIn.set(bundle, run.token);
    sendEvent({ ev: 'result', id: run.id, main: false, data: bundle.data, metadata: bundle.metadata });
  } else {
    // no cell to attach it to (a timer after the cell ended): print the text form
    process.stdout.write(`${bundle.data['text/plain']}\n`);
  }
  return bundle;
}

function display(value, metadata) {
  show(toBundle(value, metadata));
}

function helper(mime, placeholder, convert) {
  return (value, metadata) => {
    const data = { [mime]: convert(value) };
    data['text/plain'] = typeof placeholder === 'function' ? placeholder(value) : placeholder;
    return show(new DisplayBundle(data, meta(metadata)));
  };
}

display.html = helper('text/html', '<HTML>', toText);
display.markdown = helper('text/markdown', toText, toText);
display.svg = helper('image/svg+xml', '<SVG image>', toText);
display.png = helper('image/png', '<PNG image>', toBase64);
display.jpeg = helper('image/jpeg', '<JPEG image>', toBase64);
display.json = helper('application/json', inspect, jsonValue);
display.latex = helper('text/latex', toText, toText);
display.text = helper('text/plain', toText, toText);
// A bundle that is not shown now: shown as the cell's main result when it is the last value.
display.bundle = (data, metadata) => {
  if (!isMimeBundle(data)) throw new TypeError('display.bundle() takes an object whose keys are MIME types');
  return makeBundle(data, metadata);
};

// ---------------------------------------------------------------------------------------------
// Globals for user code

// Cells resolve `require` and relative imports from the kernel's working directory. A spare kernel
// (started ahead, see ../PROTOCOL.md "setup") gets its context's directory later: enterCwd again.
let CWD = process.cwd();
let REPL_FILE = path.join(CWD, '<repl>');
let userRequire = createRequire(REPL_FILE);

function enterCwd(dir) {
  process.chdir(dir);
  CWD = process.cwd();
  REPL_FILE = path.join(CWD, '<repl>');
  userRequire = createRequire(REPL_FILE);
  defineGlobal('require', userRequire);
  defineGlobal('__filename', REPL_FILE);
  defineGlobal('__dirname', CWD);
}

function isBareSpecifier(spec) {
  return !/^[./]/.test(spec) && !/^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(spec);
}

// Rewritten static imports go through this: `import()` of the cell resolves from the cwd like an ES
// module there would; a bare name that ESM resolution cannot find (ESM ignores NODE_PATH) falls back
// to what `require.resolve` finds (cwd node_modules, then NODE_PATH).
const lizardHelpers = Object.freeze({
  async imp(promise, spec) {
    try {
      return await promise;
    } catch (e) {
      if (e && e.code === 'ERR_MODULE_NOT_FOUND' && isBareSpecifier(spec)) {
        let resolved;
        try { resolved = userRequire.resolve(spec); } catch { throw e; }
        return import(require('url').pathToFileURL(resolved).href);
      }
      throw e;
    }
  },
});

function defineGlobal(name, value, writable = true) {
  Object.defineProperty(globalThis, name, { value, writable, configurable: writable, enumerable: false });
}

defineGlobal('require', userRequire);
defineGlobal('__filename', REPL_FILE);
defineGlobal('__dirname', CWD);
defineGlobal('display', display);
defineGlobal('__lizard', lizardHelpers, false);

// USE_MAIN_CONTEXT_DEFAULT_LOADER prints an ExperimentalWarning on the first import() of a cell; it is
// noise for the user, so that one warning (and only it) is dropped.
const emitWarning = process.emitWarning;
process.emitWarning = function (warning, ...rest) {
  try {
    const text = typeof warning === 'string' ? warning : warning && warning.message;
    if (typeof text === 'string' && text.includes('USE_MAIN_CONTEXT_DEFAULT_LOADER')) return undefined;
  } catch { /* fall through */ }
  return emitWarning.call(this, warning, ...rest);
};

// ---------------------------------------------------------------------------------------------
// Cell rewriting

let acorn = null; // loaded after `ready` (saves ~10 ms of start-up)
const PARSE_OPTIONS = {
  ecmaVersion: 'latest',
  sourceType: 'script',
  allowAwaitOutsideFunction: true,
  allowReturnOutsideFunction: false,
  allowImportExportEverywhere: true, // top-level `import` in a script; nested ones are left to V8 to reject
  allowHashBang: true,
};

// Acorn is loaded through a V8 code cache that the sandbox's JavaScript kernels share
// (`acorn.v8cache` beside this file): the first kernel writes it after its warm-up parse, so it
// holds acorn's lazily compiled parser functions too, and later kernels skip compiling them
// (≈ 7 → 4 ms of a kernel's start). The cache is the sandbox user's own file and V8 checks it
// against the source and its own version; any failure falls back to a plain `require`.
const ACORN_CACHE = path.join(__dirname, 'acorn.v8cache');
let acornScript = null; // the vm.Script acorn came from, until its cache has been written

function loadAcorn() {
  try {
    const file = require.resolve('acorn');
    const source = fs.readFileSync(file, 'utf8');
    let cachedData;
    try { cachedData = fs.readFileSync(ACORN_CACHE); } catch { /* first kernel of the sandbox */ }
    const script = new vm.Script(require('module').wrap(source), { filename: file, cachedData });
    const mod = { exports: {} };
    script.runInThisContext().call(mod.exports, mod.exports, createRequire(file), mod, file, path.dirname(file));
    if (typeof mod.exports.parse !== 'function') throw new Error('not acorn');
    if (!cachedData || script.cachedDataRejected) acornScript = script;
    return mod.exports;
  } catch {
    return require('acorn');
  }
}

// Write acorn's code cache once its parser has run (called after the warm-up parse).
function saveAcornCache() {
  const script = acornScript;
  acornScript = null;
  if (!script) return;
  try {
    const tmp = `${ACORN_CACHE}.${process.pid}`;
    fs.writeFileSync(tmp, script.createCachedData(), { mode: 0o600 });
    fs.renameSync(tmp, ACORN_CACHE);
  } catch { /* a read-only run dir: every kernel compiles acorn itself */ }
}

function parse(src) {
  if (!acorn) acorn = loadAcorn();
  return acorn.parse(src, PARSE_OPTIONS);
}

const FUNCTION_TYPES = new Set(['FunctionDeclaration', 'FunctionExpression', 'ArrowFunctionExpression']);

// Depth-first walk over child nodes; `enter(node, parent, key)` returns false to skip the children.
function walk(node, enter, parent = null, key = null) {
  if (enter(node, parent, key) === false) return;
  for (const k of Object.keys(node)) {
    const v = node[k];
    if (v === null || typeof v !== 'object') continue;
    if (Array.isArray(v)) {
      for (const item of v) if (item && typeof item.type === 'string') walk(item, enter, node, k);
    } else if (typeof v.type === 'string') {
      walk(v, enter, node, k);
    }
  }
}

function hasTopLevelAwait(node) {
  let found = false;
  walk(node, (n) => {
    if (found || FUNCTION_TYPES.has(n.type)) return false;
    if (n.type === 'AwaitExpression' || (n.type === 'ForOfStatement' && n.await)) { found = true; return false; }
    return true;
  });
  return found;
}

function boundNames(pattern, out) {
  switch (pattern.type) {
    case 'Identifier': out.add(pattern.name); break;
    case 'ObjectPattern':
      for (const p of pattern.properties) boundNames(p.type === 'RestElement' ? p.argument : p.value, out);
      break;
    case 'ArrayPattern': for (const e of pattern.elements) if (e) boundNames(e, out); break;
    case 'RestElement': boundNames(pattern.argument, out); break;
    case 'AssignmentPattern': boundNames(pattern.left, out); break;
    default: break;
  }
}

function countNewlines(s) {
  let n = 0;
  for (let i = s.indexOf('\n'); i >= 0; i = s.indexOf('\n', i + 1)) n++;
  return n;
}

// `src` with its TypeScript types stripped by Node's own stripper (`module.stripTypeScriptTypes`,
// strip-only: enums, namespaces and parameter properties are refused, as Node refuses them in .ts
// files); null when `src` is not TypeScript either (or this Node has no stripper). The stripper
// (SWC as WebAssembly) loads at a kernel's first TypeScript cell: ≈ 70 ms and ≈ 17 MiB, paid only
// by contexts that use TypeScript.
function stripTypeScript(src) {
  const { stripTypeScriptTypes } = require('module');
  if (typeof stripTypeScriptTypes !== 'function') return null;
  let js;
  // Node may call the stripper experimental on its first use (it does under `node -e`): that warning
  // would not be the user's output, so none is let out while it runs.
  const emitWarning = process.emitWarning;
  process.emitWarning = () => {};
  try {
    js = stripTypeScriptTypes(src, { mode: 'strip' });
  } catch (e) {
    if (e && e.code === 'ERR_UNSUPPORTED_TYPESCRIPT_SYNTAX') {
      throw new SyntaxError(String(e.message).split('\n')[0]);
    }
    return null;
  } finally {
    process.emitWarning = emitWarning;
  }
  return js === src ? null : js;
}

function cellSyntaxError(src, pos, message) {
  if (!acorn) acorn = loadAcorn();
  const loc = acorn.getLineInfo(src, pos);
  const err = new SyntaxError(`${message} (${loc.line}:${loc.column})`);
  err.pos = pos;
  err.loc = loc;
  return err;
}

class Rewriter {
  constructor(src) {
    this.src = src;
    this.edits = []; // {start, end, text}; applied in (stable) start order
    this.names = new Set(); // globals assigned by the rewritten code, created before it runs
  }

  insert(pos, text) {
    this.edits.push({ start: pos, end: pos, text });
  }

  // Replace src[start, end) by text, keeping the number of lines.
  replace(start, end, text) {
    const missing = countNewlines(this.src.slice(start, end)) - countNewlines(text);
    this.edits.push({ start, end, text: missing > 0 ? text + '\n'.repeat(missing) : text });
  }

  // ctx: 'stmt' (statement position), 'init' (for (...;;) head) or 'left' (for-in/of left side)
  declaration(node, ctx) {
    if (node.kind !== 'var' && node.kind !== 'let' && node.kind !== 'const') return;
    const decls = node.declarations;
    for (const d of decls) boundNames(d.id, this.names);
    if (ctx === 'left') {
      if (!decls[0].init) this.replace(node.start, decls[0].id.start, '');
      return;
    }
    this.replace(node.start, decls[0].start, 'void (');
    for (const d of decls) {
      if (d.init) continue;
      if (node.kind === 'var') this.replace(d.start, d.end, 'void 0'); // keeps an existing value
      else this.insert(d.end, ' = undefined');
    }
    this.insert(decls[decls.length - 1].end, ')');
    if (ctx === 'stmt' && this.src[node.end - 1] !== ';') this.insert(node.end, ';');
  }

  classDeclaration(node) {
    this.names.add(node.id.name);
    this.insert(node.start, `${node.id.name} = `);
    this.insert(node.end, ';');
  }

  importDeclaration(node) {
    const src = this.src;
    const spec = JSON.stringify(node.source.value);
    let args = spec;
    if (node.attributes && node.attributes.length) {
      const text = (n) => src.slice(n.start, n.end);
      const attrs = node.attributes.map((a) => `${text(a.key)}: ${text(a.value)}`);
      args += `, { with: { ${attrs.join(', ')} } }`;
    }
    const load = `await __lizard.imp(import(${args}), ${spec})`;
    let def = null;
    let ns = null;
    const named = [];
    for (const s of node.specifiers) {
      this.names.add(s.local.name);
      if (s.type === 'ImportDefaultSpecifier') def = s.local.name;
      else if (s.type === 'ImportNamespaceSpecifier') ns = s.local.name;
      else {
        const imported = s.imported.type === 'Identifier' ? s.imported.name : JSON.stringify(s.imported.value);
        named.push(`${imported}: ${s.local.name}`);
      }
    }
    let text;
    if (ns) text = def ? `void (${ns} = ${load}, ${def} = ${ns}.default);` : `void (${ns} = ${load});`;
    else if (def || named.length) {
      const props = def ? [`default: ${def}`, ...named] : named;
      text = `void ({${props.join(', ')}} = ${load});`;
    }
    else text = `void (${load});`;
    this.replace(node.start, node.end, text);
  }

  // `var` inside blocks/loops of an async cell would be local to the wrapper function: make them
  // global assignments as well (functions and static blocks have their own scope and are skipped).
  nestedVars(stmt) {
    walk(stmt, (n, parent, key) => {
      if (FUNCTION_TYPES.has(n.type) || n.type === 'StaticBlock') return false;
      if (n.type === 'VariableDeclaration' && n.kind === 'var') {
        let ctx = 'stmt';
        if (parent && parent.type === 'ForStatement' && key === 'init') ctx = 'init';
        else if (parent && /^For(?:In|Of)Statement$/.test(parent.type) && key === 'left') ctx = 'left';
        this.declaration(n, ctx);
      }
      return true;
    });
  }

  apply() {
    const src = this.src;
    this.edits.sort((a, b) => a.start - b.start);
    let out = '';
    let pos = 0;
    for (const e of this.edits) {
      out += src.slice(pos, e.start) + e.text;
      pos = e.end;
    }
    return out + src.slice(pos);
  }
}

// Returns {script, isAsync, hasValue, names, wrapperLine} or throws (acorn's SyntaxError has .loc).
function compileCell(code, filename) {
  let src = code;
  let columnOffset = 0;
  let ast = null;
  let wrapperLine = 0;
  // Like the Node REPL: `{a: 1}` is an object literal, not a block with a label.
  if (/^\s*\{/.test(code) && !/;\s*$/.test(code)) {
    try {
      const wrapped = `(${code}\n)`;
      const t = parse(wrapped);
      if (t.body.length === 1 && t.body[0].type === 'ExpressionStatement') {
        src = wrapped;
        ast = t;
        columnOffset = -1;
      }
    } catch { /* not an expression */ }
  }
  if (!ast) {
    try {
      ast = parse(src);
    } catch (e) {
      // Not JavaScript: TypeScript? Then its types are stripped (blanked, so lines and columns
      // stay) and the rest runs as JavaScript. Valid JavaScript is never touched.
      const js = stripTypeScript(src);
      if (js === null) throw e;
      src = js;
      ast = parse(src);
    }
  }

  const body = ast.body;
  let isAsync = false;
  for (const node of body) {
    if (node.type === 'ImportDeclaration') { isAsync = true; break; }
  }
  if (!isAsync && src.includes('await')) isAsync = body.some(hasTopLevelAwait);

  const rw = new Rewriter(src);
  const functions = [];
  for (const node of body) {
    switch (node.type) {
      case 'VariableDeclaration': rw.declaration(node, 'stmt'); break;
      case 'FunctionDeclaration': functions.push(node.id.name); break;
      case 'ClassDeclaration': rw.classDeclaration(node); break;
      case 'ImportDeclaration': rw.importDeclaration(node); break;
      case 'ExportNamedDeclaration':
      case 'ExportDefaultDeclaration':
      case 'ExportAllDeclaration':
        throw cellSyntaxError(src, node.start, "'export' is not supported in a cell");
      default:
        if (isAsync) rw.nestedVars(node);
    }
  }

  const last = body.length ? body[body.length - 1] : null;
  const hasValue = !!last && last.type === 'ExpressionStatement';
  let text;
  if (!isAsync) {
    text = rw.apply();
  } else {
    // function declarations are local to the wrapper: publish them first thing (after directives)
    const publish = functions.map((f) => `this.${f} = ${f};`).join(' ');
    let directivesEnd = 0;
    for (const node of body) {
      if (node.type === 'ExpressionStatement' && node.directive !== undefined) directivesEnd = node.end;
      else break;
    }
    let prefix = '(async () => {';
    if (publish && directivesEnd) rw.insert(directivesEnd, `; ${publish}`);
    else if (publish) prefix += ` ${publish} `;
    if (hasValue) {
      // `return {value: (` goes right after the previous statement (or into the prefix), so the
      // last statement's own line keeps its columns; the wrapper object keeps a promise value as is.
      const prev = body.length > 1 ? body[body.length - 2] : null;
      if (prev) rw.insert(prev.end, ';return {value: (');
      else prefix += 'return {value: (';
      rw.insert(src[last.end - 1] === ';' ? last.end - 1 : last.end, ')}');
    }
    text = `${prefix}${rw.apply()}\n})()`;
    columnOffset -= prefix.length;
    wrapperLine = countNewlines(src) + 2;
  }

  const script = new vm.Script(text, {
    filename,
    columnOffset,
    importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  return { script, isAsync, hasValue, names: rw.names, wrapperLine };
}

function syntaxErrorEvent(id, err, src, filename) {
  const loc = err.loc || { line: 1, column: 0 };
  const line = src.split('\n')[loc.line - 1] || '';
  const caret = line.slice(0, loc.column).replace(/[^\t]/g, ' ') + '^';
  const message = safeString(err.message, 'invalid syntax');
  return {
    ev: 'error', id, name: 'SyntaxError', value: message,
    traceback: [`${filename}:${loc.line}`, line.replace(/\r$/, ''), caret, '', `SyntaxError: ${message}`],
  };
}

// ---------------------------------------------------------------------------------------------
// Runs

const RUN_OPTIONS = { breakOnSigint: true, displayErrors: false };
let current = null; // the run being answered: {id, token, finished, isAsync, restoreEnv}
let runTokens = 0;
const queue = [];
let pumping = false;

function applyEnv(env) {
  if (!env || typeof env !== 'object') return () => {};
  const saved = [];
  for (const key of Object.keys(env)) {
    const value = env[key];
    saved.push([key, key in process.env ? process.env[key] : undefined]);
    if (value === null || value === undefined) delete process.env[key];
    else process.env[key] = String(value);
  }
  return () => {
    for (let i = saved.length - 1; i >= 0; i--) {
      const [key, old] = saved[i];
      if (old === undefined) delete process.env[key];
      else process.env[key] = old;
    }
  };
}

function finish(run, status) {
  if (run.finished) return;
  run.finished = true;
  try { run.restoreEnv(); } catch { /* keep going: done must be sent */ }
  sendEvent({ ev: 'done', id: run.id, status });
  if (current === run) current = null;
  pump();
}

function fail(run, err, hidden = run.hiddenFrame) {
  if (run.finished) return;
  if (prop(err, 'code') === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') {
    interrupt(run);
    return;
  }
  let ev;
  try {
    ev = errorEvent(run.id, err, hidden);
  } catch {
    ev = { ev: 'error', id: run.id, name: 'Error', value: 'unprintable exception', traceback: [] };
  }
  try {
    sendEvent(ev);
  } finally {
    finish(run, 'error');
  }
}

function interrupt(run) {
  if (run.finished) return;
  sendEvent({
    ev: 'error', id: run.id, name: 'Interrupted', value: 'execution interrupted by SIGINT',
    traceback: ['Interrupted: execution interrupted by SIGINT'],
  });
  finish(run, 'interrupted');
}

function emitMain(run, value) {
  if (value === undefined || run.finished) return;
  let bundle = false;
  try { bundle = value instanceof DisplayBundle; } catch { /* a Proxy with a throwing trap */ }
  if (bundle) {
    if (shownIn.get(value) === run.token) return; // display.html(...) as last line: already shown
    sendEvent({ ev: 'result', id: run.id, main: true, data: value.data, metadata: value.metadata });
    return;
  }
  sendEvent({ ev: 'result', id: run.id, main: true, data: { 'text/plain': inspect(value) }, metadata: {} });
}

function startRun(msg) {
  const run = {
    id: msg.id === undefined ? null : msg.id,
    token: ++runTokens,
    finished: false,
    isAsync: false,
    hiddenFrame: null,
    restoreEnv: () => {},
  };
  current = run;
  const filename = `<cell-${msg.id}>`;
  const code = typeof msg.code === 'string' ? msg.code : safeString(msg.code, '');
  try {
    run.restoreEnv = applyEnv(msg.env);
    let plan;
    try {
      plan = compileCell(code, filename);
    } catch (e) {
      if (e instanceof SyntaxError && e.loc && typeof e.pos === 'number') {
        sendEvent(syntaxErrorEvent(run.id, e, code, filename));
        finish(run, 'error');
      } else {
        fail(run, e, true); // e.g. syntax that acorn accepts and this V8 does not
      }
      return;
    }
    for (const name of plan.names) if (!(name in globalThis)) globalThis[name] = undefined;
    const ret = plan.script.runInThisContext(RUN_OPTIONS);
    if (!plan.isAsync) {
      if (plan.hasValue) emitMain(run, ret);
      finish(run, 'ok');
      return;
    }
    run.isAsync = true;
    run.hiddenFrame = `at ${filename}:${plan.wrapperLine}:`;
    ret.then(
      (wrapped) => {
        if (run.finished) return;
        try {
          if (wrapped && plan.hasValue) emitMain(run, wrapped.value);
          finish(run, 'ok');
        } catch (e) {
          fail(run, e);
        }
      },
      (err) => fail(run, err),
    );
  } catch (e) {
    fail(run, e);
  }
}

function pump() {
  if (pumping) return;
  pumping = true;
  try {
    while (!current && queue.length) {
      const msg = queue.shift();
      if (msg.op === 'exec') startRun(msg);
      else if (msg.op === 'setup') setupOp(msg);
      else if (msg.op === 'fork') forkOp(msg);
      else hibernateOp(msg);
    }
  } finally {
    pumping = false;
  }
}

let settleFork = null; // a forked kernel's last step (zygote.js), run at its first control message

function handleLine(line) {
  if (!line.trim()) return;
  if (settleFork) {
    const settle = settleFork;
    settleFork = null;
    settle();
  }
  if (forkedOnce) require('./zygote.js').reapIntermediates();
  let msg;
  try {
    msg = JSON.parse(line);
  } catch (e) {
    process.stderr.write(`lizard js runner: ignoring malformed control line: ${e.message}\n`);
    return;
  }
  if (msg && ['exec', 'snapshot', 'restore', 'setup', 'fork'].includes(msg.op)) {
    queue.push(msg);
    pump();
  } else {
    process.stderr.write(`lizard js runner: ignoring unknown control message ${JSON.stringify(msg && msg.op)}\n`);
  }
}


// ---------------------------------------------------------------------------------------------
// Hibernation (`snapshot` / `restore` control messages, see ../PROTOCOL.md)
//
// User state is every own property of globalThis that was not there when the runner started (cells'
// let/const/class/function declarations are globals, see the rewriting above). Functions and classes
// are saved as source text and re-evaluated at global scope (closures over non-global variables lose
// those variables); other values go through v8.serialize (structured clone), each in its own file; an
// object whose constructor is a saved class gets that class's prototype back. What cannot be saved
// (native functions, bound functions, symbols, sockets, streams, timers, promises...) is reported lost.

let BASELINE = null;

function hibernateSnapshot(dir) {
  const v8 = require('v8');
  fs.mkdirSync(path.join(dir, 'values'), { recursive: true });
  const items = [];
  const lost = [];
  const entries = [];
  const classes = new Map();
  const names = Object.getOwnPropertyNames(globalThis).filter((n) => !BASELINE.has(n));
  for (const name of names) {
    let value;
    try { value = globalThis[name]; } catch (e) { lost.push({ name, reason: `unreadable: ${safeString(e && e.message, 'error')}` }); continue; }
    if (typeof value === 'function') {
      let src = '';
      try { src = Function.prototype.toString.call(value); } catch { /* below */ }
      if (!src || /\{\s*\[native code\]\s*\}$/.test(src)) {
        lost.push({ name, reason: 'native or bound function: no source to restore from' });
        continue;
      }
      const kind = /^class\b/.test(src) ? 'class' : 'function';
      if (kind === 'class') classes.set(value, name);
      entries.push({ name, kind, source: src });
      items.push({ name, kind });
    }
  }
  let i = 0;
  for (const name of names) {
    let value;
    try { value = globalThis[name]; } catch { continue; }
    if (typeof value === 'function') continue;
    if (typeof value === 'symbol') { lost.push({ name, reason: 'symbol: not serializable' }); continue; }
    let proto = null;
    if (value !== null && typeof value === 'object') {
      if (value instanceof Promise) { lost.push({ name, reason: 'promise: pending work does not survive' }); continue; }
      if (value instanceof require('events').EventEmitter) {
        lost.push({ name, reason: 'stream, socket or event emitter: a live resource, not restorable' });
        continue;
      }
      const ctor = Object.getPrototypeOf(value) && Object.getPrototypeOf(value).constructor;
      if (ctor && classes.has(ctor)) proto = classes.get(ctor);
    }
    let buf;
    try {
      buf = v8.serialize(value);
    } catch (e) {
      lost.push({ name, reason: `not serializable: ${safeString(e && e.message, 'error')}` });
      continue;
    }
    const file = `${i++}.bin`;
    fs.writeFileSync(path.join(dir, 'values', file), buf);
    entries.push({ name, kind: 'variable', file, proto });
    items.push({ name, kind: 'variable' });
  }
  const cwd = process.cwd();
  items.push({ name: cwd, kind: 'cwd' });
  fs.writeFileSync(path.join(dir, 'state.json'), JSON.stringify({ entries, cwd, env: { ...process.env } }));
  return { items, lost };
}

function hibernateRestore(dir) {
  const v8 = require('v8');
  const items = [];
  const lost = [];
  const state = JSON.parse(fs.readFileSync(path.join(dir, 'state.json'), 'utf8'));
  for (const e of state.entries) {
    if (e.kind === 'variable') continue;
    try {
      globalThis[e.name] = new vm.Script(`(${e.source}\n)`, { filename: `<restored ${e.name}>` }).runInThisContext();
      items.push({ name: e.name, kind: e.kind });
    } catch (err) {
      lost.push({ name: e.name, reason: `source did not evaluate: ${safeString(err && err.message, 'error')}` });
    }
  }
  for (const e of state.entries) {
    if (e.kind !== 'variable') continue;
    try {
      const value = v8.deserialize(fs.readFileSync(path.join(dir, 'values', e.file)));
      if (e.proto && typeof globalThis[e.proto] === 'function' && value !== null && typeof value === 'object') {
        Object.setPrototypeOf(value, globalThis[e.proto].prototype);
      }
      globalThis[e.name] = value;
      items.push({ name: e.name, kind: 'variable' });
    } catch (err) {
      lost.push({ name: e.name, reason: `could not be loaded: ${safeString(err && err.message, 'error')}` });
    }
  }
  for (const [k, v] of Object.entries(state.env || {})) {
    // The agent's own variables and the sandbox's name are the new kernel's (a clone is another
    // sandbox), never the saved ones.
    if (k.startsWith('LIZARD_') || k === 'HOSTNAME') continue;
    if (process.env[k] !== v) process.env[k] = v;
  }
  if (state.cwd) {
    try { process.chdir(state.cwd); items.push({ name: state.cwd, kind: 'cwd' }); }
    catch (err) { lost.push({ name: state.cwd, reason: `cwd: ${safeString(err && err.message, 'error')}` }); }
  }
  return { items, lost };
}

function hibernateOp(msg) {
  const id = msg.id === undefined ? null : msg.id;
  let status = 'ok';
  let report = { items: [], lost: [] };
  try {
    if (typeof msg.dir !== 'string' || !msg.dir) throw new Error(`${msg.op} needs a string 'dir'`);
    report = msg.op === 'snapshot' ? hibernateSnapshot(msg.dir) : hibernateRestore(msg.dir);
  } catch (e) {
    status = 'error';
    report.lost.push({ name: '*', reason: safeString(e && e.message, 'error') });
  }
  sendEvent({ ev: 'report', id, items: report.items, lost: report.lost });
  sendEvent({ ev: 'done', id, status });
}

// `setup`: a spare kernel becomes a context's kernel (its working directory); answered with `done`.
function setupOp(msg) {
  const id = msg.id === undefined ? null : msg.id;
  try {
    if (typeof msg.cwd !== 'string' || !msg.cwd) throw new Error("setup needs a string 'cwd'");
    enterCwd(msg.cwd);
    sendEvent({ ev: 'done', id, status: 'ok' });
  } catch (e) {
    sendEvent({ ev: 'error', id, name: 'SetupError', value: safeString(e && e.message, 'error'), traceback: [] });
    sendEvent({ ev: 'done', id, status: 'error' });
  }
}

// `fork` (PROTOCOL.md, "Fork of a live kernel"): this kernel forks into a new one (zygote.js's
// forkLive). Only a kernel running single-threaded V8 can (one forked from the zygote): a fork keeps
// only the calling thread. Runs from setImmediate (the check phase), never inside libuv's poll.
let RESOURCES_AT_START = null;
let forkedOnce = false; // this kernel has forked: intermediates to reap at the next message // process.getActiveResourcesInfo() counts once ready

const LOST_REASONS = {
  TCPServerWrap: 'a listening socket is shared with the source: connections go to either context',
  PipeServerWrap: 'a listening socket is shared with the source: connections go to either context',
  TCPSocketWrap: 'an open connection is shared with the source: use it in one context only',
  TCPWrap: 'an open connection is shared with the source: use it in one context only',
  PipeWrap: 'an open pipe or socket is shared with the source: use it in one context only',
  TTYWrap: 'a terminal stream is shared with the source',
  UDPWrap: 'a UDP socket is shared with the source: datagrams go to either context',
  ProcessWrap: 'a child process stays the source\'s: the fork never sees it exit',
  Worker: 'worker threads do not survive a fork',
  MessagePort: 'worker threads do not survive a fork',
};

function resourceCounts() {
  const n = new Map();
  for (const r of process.getActiveResourcesInfo()) n.set(r, (n.get(r) || 0) + 1);
  return n;
}

function forkLost() {
  const lost = [];
  const before = RESOURCES_AT_START || new Map();
  for (const [kind, count] of resourceCounts()) {
    if (kind === 'Timeout' || kind === 'Immediate') continue; // timers go along
    const extra = count - (before.get(kind) || 0);
    if (extra <= 0) continue;
    const reason = LOST_REASONS[kind]
      || (/Req|Promise|Callback/.test(kind)
        ? 'an operation in flight (file, DNS, crypto) completes in the source only'
        : 'an event-loop handle of the source: it may not work in the fork');
    lost.push({ name: `${extra} ${kind}`, reason });
  }
  return lost;
}

function forkOp(msg) {
  const id = msg.id === undefined ? null : msg.id;
  current = { fork: true, finished: false };
  const answer = (status, error) => {
    if (error) sendEvent({ ev: 'error', id, name: 'ForkError', value: error, traceback: [] });
    sendEvent({ ev: 'done', id, status });
    current = null;
    pump();
  };
  const procs = Array.isArray(msg.cgroup) ? msg.cgroup : null;
  if (typeof msg.dir !== 'string' || !msg.dir || !procs || !procs.every((p) => typeof p === 'string')) {
    answer('error', "fork needs a string 'dir' and a list 'cgroup'");
    return;
  }
  if (!process.execArgv.includes('--single-threaded')) {
    answer('error', 'this JavaScript kernel was spawned with V8\'s threads (no zygote): it cannot be forked');
    return;
  }
  setImmediate(() => {
    let r;
    const lost = forkLost();
    try {
      r = require('./zygote.js').forkLive(msg.dir, procs, EVENT_FD, CONTROL_FD);
    } catch (e) {
      answer('error', safeString(e && e.message, 'fork failed'));
      return;
    }
    if (r.child) {
      settleFork = r.settle;
      current = null;
      sendEvent({ ev: 'ready' });
      pump();
      return;
    }
    forkedOnce = true;
    sendEvent({ ev: 'forked', id, pid: r.kid, lost });
    answer('ok');
  });
}

// ---------------------------------------------------------------------------------------------
// Process-level handlers

// SIGINT: a synchronous cell is stopped by `breakOnSigint` (this listener is suspended meanwhile); an
// async cell is answered at once and left running in the background; idle, it is ignored.
process.on('SIGINT', () => {
  const run = current;
  if (run && run.isAsync && !run.finished) interrupt(run);
});

// Errors outside a cell's own control flow (timers, listeners, forgotten promises) must not end the
// kernel: report them on stderr the way Node would and carry on.
process.on('uncaughtException', (err) => {
  try { process.stderr.write(`Uncaught ${inspect(err)}\n`); } catch { /* nothing left to do */ }
});
process.on('unhandledRejection', (reason) => {
  try { process.stderr.write(`Uncaught (in promise) ${inspect(reason)}\n`); } catch { /* nothing left to do */ }
});

// ---------------------------------------------------------------------------------------------
// Control channel (fd 4) and start-up

function readControl() {
  let stream;
  try {
    stream = new (require('net').Socket)({ fd: CONTROL_FD, readable: true, writable: false });
  } catch {
    stream = fs.createReadStream(null, { fd: CONTROL_FD });
  }
  stream.setEncoding('utf8');
  let buf = '';
  stream.on('data', (chunk) => {
    let scan = buf.length;
    buf += chunk;
    let nl;
    while ((nl = buf.indexOf('\n', scan)) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      scan = 0;
      handleLine(line);
    }
  });
  const end = () => {
    if (buf.trim()) { const rest = buf; buf = ''; handleLine(rest); }
    process.exit(0);
  };
  stream.on('end', end);
  stream.on('error', (e) => {
    if (e.code !== 'EOF') process.stderr.write(`lizard js runner: control channel: ${e.message}\n`);
    process.exit(0);
  });
}

// Warm the lazy parts (acorn and its code cache, the compiler paths, util.inspect).
function warmUp() {
  try {
    compileCell('let warm = 1; (async () => { for await (const x of []) warm += x; })(); warm', '<warm-up>');
    compileCell('void 0', '<warm-up>').script.runInThisContext(RUN_OPTIONS);
    inspect({ a: [1, 'b'] });
    saveAcornCache();
  } catch { /* a broken acorn install shows up as the first cell's error instead */ }
}

// Not dumpable (no other process of the sandbox may read this kernel's memory or open its fds
// through /proc): a zygote and its forks do it in zygote.js; a spawned kernel here, when Node has
// node:ffi (without it, a spawned JavaScript kernel stays dumpable: see SECURITY.md).
if (ZYGOTE_FD === null) {
  try {
    const emitWarning = process.emitWarning;
    process.emitWarning = () => {};
    let ffi;
    try { ffi = require('node:ffi'); } finally { process.emitWarning = emitWarning; }
    const { prctl } = ffi.dlopen(null, {
      prctl: { arguments: ['i32', 'u64', 'u64', 'u64', 'u64'], return: 'i32' },
    }).functions;
    prctl(4 /* PR_SET_DUMPABLE */, 0n, 0n, 0n, 0n);
  } catch { /* no node:ffi */ }
}

if (ZYGOTE_FD !== null) {
  // A zygote warms up before it forks, so every kernel starts warm; `serve` returns in kernels only.
  warmUp();
  ({ eventFd: EVENT_FD, controlFd: CONTROL_FD, settle: settleFork } = require('./zygote.js').serve(ZYGOTE_FD));
  enterCwd(process.cwd()); // require, __filename and __dirname follow the kernel's directory
}
attachStdio();
BASELINE = new Set(Object.getOwnPropertyNames(globalThis));
readControl();
RESOURCES_AT_START = resourceCounts();
sendEvent({ ev: 'ready' });
// A spawned kernel warms up while waiting for the first cell.
if (ZYGOTE_FD === null) setImmediate(warmUp);
