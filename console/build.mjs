// The console's build: src/main.tsx (and the CSS it imports) bundled and minified by esbuild into
// <out>/console.js and <out>/console.css, and src/index.html copied to <out>/index.html.
// `node build.mjs` writes dist/ (committed: `lizard serve` embeds it, so a cargo build never needs
// npm); `node build.mjs <dir>` writes elsewhere (test/build.test.mjs compares that with dist/).
import * as esbuild from 'esbuild';
import { copyFile, mkdir } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? join(HERE, 'dist'));

await mkdir(out, { recursive: true });
await esbuild.build({
  absWorkingDir: HERE,
  entryPoints: { console: 'src/main.tsx' },
  outdir: out,
  bundle: true,
  format: 'esm',
  target: 'es2022',
  minify: true,
  charset: 'utf8',
  legalComments: 'eof',
  logLevel: 'warning',
});
await copyFile(join(HERE, 'src/index.html'), join(out, 'index.html'));
