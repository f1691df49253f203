// The error table both SDKs share (issue #20), no server needed: src/error-table.ts is what
// `npm run gen:errors` makes of sdk/errors.json today (byte for byte), the table covers exactly
// the wire's error codes (crates/lizard-server/openapi.json), and a response with each code, or
// with a known status and no Lizard body, becomes the class the table names.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { generateErrors } from '../scripts/gen-errors.mjs';
import { errorFromResponse, LizardError, SandboxError } from '../dist/errors.js';
import { SDK_DIR } from './helpers/server.js';

const SOURCE = join(SDK_DIR, '../errors.json');
const OPENAPI = join(SDK_DIR, '../../crates/lizard-server/openapi.json');

test('src/error-table.ts is what `npm run gen:errors` makes of sdk/errors.json', async () => {
  const committed = await readFile(join(SDK_DIR, 'src/error-table.ts'), 'utf8');
  assert.equal(committed, await generateErrors(SOURCE), 'stale: run `npm run gen:errors` and `npm run build`');
});

test('every wire error code has a class, and no other code is listed', async () => {
  const table = JSON.parse(await readFile(SOURCE, 'utf8'));
  const doc = JSON.parse(await readFile(OPENAPI, 'utf8'));
  const codes = doc.components.schemas.ErrorCode.oneOf.map((v) => v.const).sort();
  assert.deepEqual(Object.keys(table.by_code).sort(), codes);
});

test('responses become the classes the table names', async () => {
  const table = JSON.parse(await readFile(SOURCE, 'utf8'));
  for (const [code, name] of Object.entries(table.by_code)) {
    const e = errorFromResponse(599, { code, message: 'm' });
    assert.equal(e.constructor.name, name, code);
    assert.deepEqual([e.code, e.status, e.message], [code, 599, 'm']);
  }
  for (const [status, name] of Object.entries(table.by_status)) {
    const e = errorFromResponse(Number(status), undefined, '<html>proxy</html>');
    assert.equal(e.constructor.name, name, status);
    assert.equal(e.code, `http_${status}`);
  }
  assert.equal(errorFromResponse(502, undefined).constructor, SandboxError);
  assert.equal(errorFromResponse(418, undefined).constructor, LizardError);
});
