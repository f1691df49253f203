// A sandbox's files: list a directory (`GET /v1/sandboxes/{id}/files/list`), go into its
// folders, view a text file (`GET …/files?path=`), download one (the same bytes, saved by the
// browser), and upload files into the directory (`PUT …/files?path=`, the raw bytes).

import { useEffect, useRef, useState } from 'preact/hooks';
import { type Api, type EntryInfo, query } from './api';
import { Busy, Empty, ErrorBox, saveBlob, size } from './ui';

/** Files larger than this are not shown inline (download them instead). */
const VIEW_LIMIT = 1 << 20;

function parentOf(path: string): string {
  const i = path.replace(/\/+$/, '').lastIndexOf('/');
  return i <= 0 ? '/' : path.slice(0, i);
}

function join(dir: string, name: string): string {
  return dir.endsWith('/') ? dir + name : `${dir}/${name}`;
}

export function FileBrowser({ api, sandbox }: { api: Api; sandbox: string }) {
  const base = `/v1/sandboxes/${encodeURIComponent(sandbox)}/files`;
  const [dir, setDir] = useState('/home/user');
  const [pathInput, setPathInput] = useState('/home/user');
  const [entries, setEntries] = useState<EntryInfo[] | null>(null);
  const [viewing, setViewing] = useState<{ path: string; text: string } | null>(null);
  const [busy, setBusy] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  const upload = useRef<HTMLInputElement>(null);

  useEffect(() => {
    let stop = false;
    setEntries(null);
    setPathInput(dir);
    api
      .get<EntryInfo[]>(`${base}/list${query({ path: dir, depth: 1 })}`)
      .then((l) => {
        if (stop) return;
        setEntries(l.filter((e) => e.path !== dir).sort((a, b) => Number(b.type === 'dir') - Number(a.type === 'dir') || a.name.localeCompare(b.name)));
        setError(null);
      })
      .catch((e) => !stop && setError(e));
    return () => {
      stop = true;
    };
  }, [api, base, dir, tick]);

  const bytes = async (path: string) => (await api.send('GET', `${base}${query({ path })}`, { accept: 'application/octet-stream' })).blob();

  const view = async (e: EntryInfo) => {
    setError(null);
    if (e.size > VIEW_LIMIT) {
      setViewing({ path: e.path, text: `(${size(e.size)}: too large to show here; download it)` });
      return;
    }
    try {
      const blob = await bytes(e.path);
      let text: string;
      try {
        text = new TextDecoder('utf-8', { fatal: true }).decode(await blob.arrayBuffer());
      } catch {
        text = `(${size(blob.size)} of binary data: download it)`;
      }
      setViewing({ path: e.path, text });
    } catch (err) {
      setError(err);
    }
  };

  const download = async (e: EntryInfo) => {
    setError(null);
    try {
      saveBlob(await bytes(e.path), e.name);
    } catch (err) {
      setError(err);
    }
  };

  const uploadFiles = async (files: FileList | null) => {
    if (!files || files.length === 0) return;
    setError(null);
    try {
      for (const f of Array.from(files)) {
        setBusy(`Uploading ${f.name}…`);
        await api.send('PUT', `${base}${query({ path: join(dir, f.name) })}`, { raw: f });
      }
      setTick((t) => t + 1);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(null);
      if (upload.current) upload.current.value = '';
    }
  };

  return (
    <section class="files">
      <form
        class="files-bar"
        onSubmit={(e) => {
          e.preventDefault();
          setDir(pathInput.trim() || '/');
        }}
      >
        <button type="button" class="secondary small" disabled={dir === '/'} onClick={() => setDir(parentOf(dir))}>
          ↑ Up
        </button>
        <input class="mono" name="path" value={pathInput} onInput={(e) => setPathInput(e.currentTarget.value)} />
        <button type="submit" class="secondary small">
          Go
        </button>
        <span class="spacer" />
        <label class="upload">
          Upload files
          <input ref={upload} type="file" name="upload" multiple onChange={(e) => uploadFiles(e.currentTarget.files)} />
        </label>
      </form>
      {busy && <Busy>{busy}</Busy>}
      <ErrorBox error={error} onClose={() => setError(null)} />
      {entries === null ? (
        error ? null : <Busy>Listing {dir}…</Busy>
      ) : entries.length === 0 ? (
        <Empty title={`${dir} is empty.`}>Upload files into it with “Upload files”, or write them from a cell.</Empty>
      ) : (
        <table class="list files-list">
          <thead>
            <tr>
              <th>Name</th>
              <th>Size</th>
              <th>Modified</th>
              <th>Permissions</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {entries.map((e) => (
              <tr key={e.path} data-path={e.path}>
                <td class="mono">
                  {e.type === 'dir' ? (
                    <button type="button" class="dir-link mono" onClick={() => setDir(e.path)}>
                      {e.name}/
                    </button>
                  ) : (
                    <span>
                      {e.name}
                      {e.symlink_target ? ` → ${e.symlink_target}` : ''}
                    </span>
                  )}
                </td>
                <td>{e.type === 'dir' ? '' : size(e.size)}</td>
                <td class="dim">{new Date(e.modified_ms).toLocaleString()}</td>
                <td class="mono dim">
                  {e.permissions} {e.owner}
                </td>
                <td>
                  {e.type === 'file' && (
                    <span class="actions">
                      <button type="button" class="secondary small" onClick={() => view(e)}>
                        View
                      </button>
                      <button type="button" class="secondary small" onClick={() => download(e)}>
                        Download
                      </button>
                    </span>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {viewing && (
        <div class="card viewer">
          <div class="viewer-head">
            <span class="mono">{viewing.path}</span>
            <button type="button" class="link" aria-label="Close" onClick={() => setViewing(null)}>
              ×
            </button>
          </div>
          <pre class="file-text">{viewing.text}</pre>
        </div>
      )}
    </section>
  );
}
