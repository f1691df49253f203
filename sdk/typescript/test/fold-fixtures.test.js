// The SDK's fold of recorded execution streams matches the Rust fold (no server).
//
// `tests/fixtures/executions/NAME.ndjson` (at the repository root) are raw NDJSON bodies of real
// runs; `NAME.execution.json` is the `Execution` that `lizard_proto::execution::Execution::apply`
// folds from them (recorded and checked by crates/lizard/tests/wire_fixtures.rs). Here the SDK's
// `Execution.apply` folds the same frames; `toRustShape` turns the SDK's Execution into the Rust
// JSON shape, and every top-level key of the Rust JSON must be produced, so a field added on the
// Rust side fails this test until the SDK follows. Only the public entry point is imported.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Execution, ExecutionError, Result } from '../dist/index.js';

const FIXTURES = fileURLToPath(new URL('../../../tests/fixtures/executions/', import.meta.url));
const NAMES = readdirSync(FIXTURES)
  .filter((f) => f.endsWith('.ndjson'))
  .map((f) => f.slice(0, -'.ndjson'.length))
  .sort();
/** The recorder makes at least this many fixtures (see wire_fixtures.rs). */
const MIN_FIXTURES = 14;

/**
 * Known differences between this SDK's fold and the Rust fold on real fixtures: fixture → reason.
 * Empty: the SDK agrees with the Rust fold on every fixture.
 * @type {Record<string, string>}
 */
const KNOWN_DIFFERENCES = {};

/** One SDK Result in the Rust `ExecutionResult` shape (`metadata` left out when absent, as Rust does). */
function resultToRust(r) {
  const out = { is_main_result: r.isMainResult, data: r.raw };
  if (r.metadata !== undefined) out.metadata = r.metadata;
  return out;
}

/** The SDK's Execution in the shape of the Rust `Execution` JSON. */
function toRustShape(ex) {
  const out = {
    context_id: ex.contextId ?? null,
    execution_count: ex.executionCount,
    stdout: ex.logs.stdout,
    stderr: ex.logs.stderr,
    results: ex.results.map(resultToRust),
    error: ex.error === undefined ? null : { name: ex.error.name, value: ex.error.value, traceback: ex.error.traceback },
    status: ex.status ?? null,
    duration_ms: ex.durationMs,
  };
  if (ex.usage !== undefined) out.usage = { cpu_ms: ex.usage.cpuMs, peak_rss_bytes: ex.usage.peakRssBytes };
  return out;
}

/** Fold a fixture's lines as the SDK does with a live stream: one JSON frame a line. */
function fold(name) {
  const ex = new Execution();
  const events = [];
  const text = readFileSync(`${FIXTURES}${name}.ndjson`, 'utf8');
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    events.push(ex.apply(JSON.parse(line)));
  }
  return { ex, events };
}

test('the fixtures are there', () => {
  assert.ok(NAMES.length >= MIN_FIXTURES, `only ${NAMES.length} fixtures in ${FIXTURES}`);
  for (const n of NAMES) {
    assert.doesNotThrow(() => readFileSync(`${FIXTURES}${n}.execution.json`), `${n}.ndjson has no ${n}.execution.json`);
  }
});

for (const name of NAMES) {
  const known = KNOWN_DIFFERENCES[name];
  test(`fold of ${name} matches the Rust fold`, { todo: known }, () => {
    const want = JSON.parse(readFileSync(`${FIXTURES}${name}.execution.json`, 'utf8'));
    const { ex, events } = fold(name);
    const got = toRustShape(ex);
    // Every field of the Rust Execution is compared: a new one fails here until the SDK has it.
    assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort(), `${name}: fields`);
    for (const key of Object.keys(want)) {
      assert.deepStrictEqual(got[key], want[key], `${name}: ${key}`);
    }
    // The joined views and what the callbacks were handed agree with the fold.
    assert.equal(ex.stdout, want.stdout.join(''), `${name}: stdout`);
    assert.equal(ex.stderr, want.stderr.join(''), `${name}: stderr`);
    const chunks = events.filter((e) => e?.kind === 'stdout' || e?.kind === 'stderr').map((e) => e.text);
    assert.equal(ex.output, chunks.join(''), `${name}: output`);
    assert.equal(chunks.length, want.stdout.length + want.stderr.length, `${name}: chunks`);
    const results = events.filter((e) => e?.kind === 'result').map((e) => e.result);
    assert.deepStrictEqual(results, ex.results, `${name}: results handed out`);
    for (const r of results) assert.ok(r instanceof Result);
    const errors = events.filter((e) => e?.kind === 'error').map((e) => e.error);
    assert.deepStrictEqual(errors, ex.error ? [ex.error] : [], `${name}: errors handed out`);
    if (ex.error) assert.ok(ex.error instanceof ExecutionError);
    assert.equal(events.filter((e) => e?.kind === 'end').length, 1, `${name}: end frames`);
    const main = want.results.find((r) => r.is_main_result);
    assert.equal(ex.text, main?.data['text/plain'], `${name}: text`);
    assert.equal(ex.success, want.error === null, `${name}: success`);
  });
}
