// Secrets and header injection through the SDK against a real `lizard serve` (no HTTPS upstream:
// crates/lizard/tests/secrets.rs covers the relay adding the header). `Secrets.set/list/delete`
// (no answer ever holds a value, a replace is not a create, 400 for a bad name or value, 404 for
// a project the key cannot see), `inject` at create (400 naming an unknown secret or a host the
// egress does not allow; a valid rule shows its template, not the value, in `getInfo`), and
// `setNetwork` keeping the part of the network it is not given.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createProject, startServer } from './helpers/server.js';
import { CodeSandbox, InvalidArgumentError, NotFoundError, Secrets } from '../dist/index.js';

const VALUE = 'sk-ts-5a1e7c0ffee-never-in-an-answer';

let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

const project = (name) => createProject(server, name);

const rule = (host, name) => ({ host, headers: { Authorization: `Bearer \${secret:${name}}` } });

describe('secrets', { concurrency: true }, () => {
  test('set, list, replace and delete; no answer holds a value', async () => {
    const key = await project('ts-sec');
    const first = await Secrets.set('ts-sec', 'api_token', VALUE);
    assert.equal(first.created, true);
    assert.equal(first.project, 'ts-sec');
    assert.equal(first.name, 'api_token');
    assert.ok(first.createdAt instanceof Date && first.updatedAt instanceof Date);
    assert.ok(!JSON.stringify(first).includes(VALUE));

    await new Promise((r) => setTimeout(r, 5));
    const again = await Secrets.set('ts-sec', 'api_token', `${VALUE}-2`, { apiKey: key });
    assert.equal(again.created, false);
    assert.equal(again.createdAt.getTime(), first.createdAt.getTime());
    assert.ok(again.updatedAt >= first.updatedAt);
    await Secrets.set('ts-sec', 'other-1', 'x');

    const list = await Secrets.list('ts-sec', { apiKey: key });
    assert.deepEqual(list.map((s) => s.name).sort(), ['api_token', 'other-1']);
    for (const s of list) assert.deepEqual(Object.keys(s).sort(), ['createdAt', 'name', 'project', 'updatedAt']);
    assert.ok(!JSON.stringify(list).includes(VALUE));
    // Nor does the raw wire answer.
    const raw = await fetch(`${server.url}/v1/projects/ts-sec/secrets`, { headers: { authorization: `Bearer ${key}` } });
    const text = await raw.text();
    assert.ok(!text.includes(VALUE) && !text.includes('"value"'), text);

    assert.equal(await Secrets.delete('ts-sec', 'other-1', { apiKey: key }), true);
    assert.equal(await Secrets.delete('ts-sec', 'other-1'), false);
    assert.deepEqual((await Secrets.list('ts-sec')).map((s) => s.name), ['api_token']);
  });

  test('the server refuses a bad name or value (without showing it) and hides other projects', async () => {
    await project('ts-sec-bad');
    const key = await project('ts-sec-other');
    for (const name of ['', 'a b', 'a/b', 'x'.repeat(65)]) {
      await assert.rejects(Secrets.set('ts-sec-bad', name, 'v'), InvalidArgumentError, JSON.stringify(name));
    }
    await assert.rejects(Secrets.set('ts-sec-bad', 'a b', 'v'), (e) => {
      assert.equal(e.status, 400);
      assert.match(e.message, /a b/);
      return true;
    });
    for (const value of ['', 'line\r\nX-Evil: 1', 'tab\there', 'x'.repeat(8193)]) {
      await assert.rejects(Secrets.set('ts-sec-bad', 'ok', value), (e) => {
        assert.ok(e instanceof InvalidArgumentError, `${e}`);
        assert.equal(e.status, 400);
        assert.ok(!value || !e.message.includes(value), e.message);
        return true;
      });
    }
    assert.deepEqual(await Secrets.list('ts-sec-bad'), []);
    // A project key sees its own project only: another is a 404, as is one that does not exist.
    await assert.rejects(Secrets.list('ts-sec-bad', { apiKey: key }), NotFoundError);
    await assert.rejects(Secrets.set('ts-sec-bad', 'n', 'v', { apiKey: key }), NotFoundError);
    await assert.rejects(Secrets.delete('ts-sec-bad', 'n', { apiKey: key }), NotFoundError);
    await assert.rejects(Secrets.list('ts-sec-nope'), NotFoundError);
    // The client checks its arguments' types.
    await assert.rejects(Secrets.set('ts-sec-bad', 'n', 42), InvalidArgumentError);
    await assert.rejects(Secrets.list(''), InvalidArgumentError);
  });

  test('inject at create: unknown secrets and disallowed hosts refused, templates (not values) shown', async () => {
    await project('ts-inj');
    await Secrets.set('ts-inj', 'tok', VALUE);
    const made = [];
    try {
      await assert.rejects(
        CodeSandbox.create({ project: 'ts-inj', egress: ['api.example.com'], inject: [rule('api.example.com', 'missing_one')] }),
        (e) => {
          assert.ok(e instanceof InvalidArgumentError, `${e}`);
          assert.equal(e.status, 400);
          assert.match(e.message, /missing_one/);
          return true;
        },
      );
      await assert.rejects(
        CodeSandbox.create({ project: 'ts-inj', egress: ['pypi.org'], inject: [rule('api.example.com', 'tok')] }),
        (e) => {
          assert.equal(e.status, 400);
          assert.match(e.message, /api\.example\.com/);
          assert.ok(!e.message.includes(VALUE));
          return true;
        },
      );
      await assert.rejects(
        CodeSandbox.create({ project: 'ts-inj', egress: ['api.example.com'], inject: [{ host: 'api.example.com', headers: { Host: 'x' } }] }),
        (e) => e.status === 400 && /Host/i.test(e.message),
      );
      // The client's own checks: the rule's shape, and inject without egress.
      await assert.rejects(CodeSandbox.create({ project: 'ts-inj', egress: 'all', inject: [{ host: 'a.com' }] }), InvalidArgumentError);
      await assert.rejects(CodeSandbox.create({ project: 'ts-inj', inject: [rule('a.com', 'tok')] }), InvalidArgumentError);

      const sb = await CodeSandbox.create({
        project: 'ts-inj',
        egress: ['api.example.com', '*.example.org'],
        inject: [rule('api.example.com', 'tok'), { host: '*.example.org:8443', headers: { 'X-Key': '$${secret:tok}${secret:tok}' } }],
      });
      made.push(sb);
      const want = {
        egress: { allow: ['api.example.com', '*.example.org'] },
        inject: [
          { host: 'api.example.com', headers: { Authorization: 'Bearer ${secret:tok}' } },
          { host: '*.example.org:8443', headers: { 'X-Key': '$${secret:tok}${secret:tok}' } },
        ],
      };
      assert.deepEqual(sb._info.network, want);
      const info = await sb.getInfo();
      assert.deepEqual(info.network, want);
      assert.ok(!JSON.stringify(info).includes(VALUE));
      // Nor is the value in the sandbox's environment.
      const env = await sb.runCode('import os; print(VALUE_MARK in "".join(os.environ.values()))'.replace('VALUE_MARK', JSON.stringify(VALUE)));
      assert.equal(env.stdout.trim(), 'False');

      // setNetwork: what is not given is kept; inject: [] removes the rules.
      let n = await sb.setNetwork({ egress: ['api.example.com', '*.example.org', 'pypi.org'] });
      assert.deepEqual(n.network.inject, want.inject);
      n = await sb.setNetwork({ inject: [rule('api.example.com', 'tok')] });
      assert.deepEqual(n.network, { egress: { allow: ['api.example.com', '*.example.org', 'pypi.org'] }, inject: [want.inject[0]] });
      await assert.rejects(sb.setNetwork({ inject: [rule('pypi.org', 'nope_secret')] }), (e) => e.status === 400 && /nope_secret/.test(e.message));
      // A failed change changed nothing.
      assert.deepEqual((await sb.getInfo()).network.inject, [want.inject[0]]);
      n = await sb.setNetwork({ inject: [] });
      assert.deepEqual(n.network, { egress: { allow: ['api.example.com', '*.example.org', 'pypi.org'] } });
      await assert.rejects(sb.setNetwork({ inject: 'x' }), InvalidArgumentError);
    } finally {
      for (const s of made) await s.kill();
    }
  });
});
