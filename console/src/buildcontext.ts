// A template build's context from files picked or dropped on the Templates page: each under its
// path in the context (a folder's own name left out, so `COPY app.py /app/` takes the app.py of
// the folder picked), packed in the browser as a tar (modern-tar), gzipped where the browser has
// CompressionStream, and base64'd for `BuildTemplateRequest.context`.

import { packTar } from 'modern-tar';
import { size } from './ui';

/** The API's limit on the decoded context (`lizard_proto::template::MAX_CONTEXT_BYTES`). */
export const MAX_CONTEXT_BYTES = 64 * 1024 * 1024;
/** Files of more than this in all are not packed (as in the TypeScript SDK). */
const MAX_RAW_BYTES = 8 * MAX_CONTEXT_BYTES;

/** One file of the context: its path there and its bytes. */
export interface ContextFile {
  path: string;
  file: File;
}

/** Files from an `<input type=file>`: a folder's (`webkitdirectory`) under their path in it, others by name. */
export function picked(files: FileList): ContextFile[] {
  return Array.from(files, (file) => ({
    path: file.webkitRelativePath ? file.webkitRelativePath.slice(file.webkitRelativePath.indexOf('/') + 1) : file.name,
    file,
  }));
}

/** Files and folders dropped on the page (a folder's files under their path in it). */
export async function dropped(data: DataTransfer): Promise<ContextFile[]> {
  // The items are only there during the drop event: take their entries before awaiting anything.
  const entries = Array.from(data.items, (i) => i.webkitGetAsEntry()).filter((e) => e !== null);
  const out: ContextFile[] = [];
  const walk = async (entry: FileSystemEntry, path: string): Promise<void> => {
    if (entry.isFile) {
      const file = await new Promise<File>((ok, fail) => (entry as FileSystemFileEntry).file(ok, fail));
      out.push({ path, file });
    } else if (entry.isDirectory) {
      const reader = (entry as FileSystemDirectoryEntry).createReader();
      for (;;) {
        const batch = await new Promise<FileSystemEntry[]>((ok, fail) => reader.readEntries(ok, fail));
        if (batch.length === 0) break;
        for (const e of batch) await walk(e, path ? `${path}/${e.name}` : e.name);
      }
    }
  };
  for (const e of entries) await walk(e, e.isDirectory ? '' : e.name);
  return out;
}

/** `files` with `more` added (a path added again is the newer file), sorted by path. */
export function merge(files: ContextFile[], more: ContextFile[]): ContextFile[] {
  const byPath = new Map(files.map((f) => [f.path, f]));
  for (const f of more) byPath.set(f.path, f);
  return [...byPath.values()].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

export function totalSize(files: ContextFile[]): number {
  return files.reduce((n, f) => n + f.file.size, 0);
}

/**
 * `files` as `BuildTemplateRequest.context`: the base64 of a tar.gz (of a tar where the browser
 * cannot gzip). An error saying so when it is larger than the API takes.
 */
export async function pack(files: ContextFile[]): Promise<string> {
  const gzip = typeof CompressionStream === 'function';
  const raw = totalSize(files);
  if (raw > (gzip ? MAX_RAW_BYTES : MAX_CONTEXT_BYTES)) {
    throw new Error(`the build context's files come to ${size(raw)}: more than a context of at most ${MAX_CONTEXT_BYTES >> 20} MiB${gzip ? ' (compressed)' : ''} can hold`);
  }
  const tar = await packTar(
    files.map(({ path, file }) => ({ header: { name: path, size: file.size, type: 'file', mtime: new Date(file.lastModified) }, body: file })),
  );
  const archive = gzip ? await new Response(new Blob([tar]).stream().pipeThrough(new CompressionStream('gzip'))).blob() : new Blob([tar]);
  if (archive.size > MAX_CONTEXT_BYTES) {
    throw new Error(`the build context is ${size(archive.size)} as a ${gzip ? 'tar.gz' : 'tar'}: the API takes at most ${MAX_CONTEXT_BYTES >> 20} MiB`);
  }
  const url = await new Promise<string>((ok, fail) => {
    const r = new FileReader();
    r.onload = () => ok(String(r.result));
    r.onerror = () => fail(r.error);
    r.readAsDataURL(archive);
  });
  return url.slice(url.indexOf(',') + 1);
}
