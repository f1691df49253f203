#!/usr/bin/env node
// Generates src/error-table.ts from sdk/errors.json, the mapping from an API error to an error
// class that both SDKs share (issue #20). Run `npm run gen:errors` after that file changes;
// test/error-table.test.js fails while the committed file is stale.
//
//   node scripts/gen-errors.mjs [--input errors.json] [--output error-table.ts]
//
// The table holds class names; src/errors.ts resolves them to its classes.

import { readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** The generated text for the table at `input`. */
export async function generateErrors(input) {
  const table = JSON.parse(await readFile(input, 'utf8'));
  const byCode = Object.entries(table.by_code).sort(([a], [b]) => (a < b ? -1 : 1));
  const byStatus = Object.entries(table.by_status).sort(([a], [b]) => Number(a) - Number(b));
  return [
    '// GENERATED FILE — do not edit by hand: `npm run gen:errors` makes it from sdk/errors.json.',
    '',
    '/** Error code and HTTP status → the name of the SDK\'s error class (see errors.ts). */',
    'export const BY_CODE: Readonly<Record<string, string>> = {',
    ...byCode.map(([code, name]) => `  ${code}: '${name}',`),
    '};',
    '',
    'export const BY_STATUS: Readonly<Record<number, string>> = {',
    ...byStatus.map(([status, name]) => `  ${status}: '${name}',`),
    '};',
    '',
  ].join('\n');
}

async function main() {
  const { values } = parseArgs({
    options: {
      input: { type: 'string', default: join(ROOT, '../errors.json') },
      output: { type: 'string', default: join(ROOT, 'src/error-table.ts') },
    },
  });
  await writeFile(values.output, await generateErrors(values.input));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  await main();
}
