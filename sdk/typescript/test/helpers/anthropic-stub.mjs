// Stand-in for api.anthropic.com, loaded with `node --import` by the test of the guide's
// "AI-generated code" snippet: sandboxes and tests have no network, so `fetch` to that host answers
// with a canned Messages API reply whose text is Python code. Every other URL goes to the real
// `fetch` (the SDK's requests to Lizard included). It checks the request looks like the guide's.

const FIBONACCI = `a, b = 0, 1
while a <= 100:
    print(a)
    a, b = b, a + b
`;

const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init = {}) => {
  const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
  if (!url.startsWith('https://api.anthropic.com/')) return realFetch(input, init);
  const headers = new Headers(init.headers);
  const body = JSON.parse(init.body ?? '{}');
  if (init.method !== 'POST' || !headers.get('x-api-key') || !headers.get('anthropic-version') || !body.messages?.length) {
    return Response.json({ type: 'error', error: { type: 'invalid_request_error' } }, { status: 400 });
  }
  return Response.json({
    id: 'msg_stub',
    type: 'message',
    role: 'assistant',
    model: body.model,
    content: [{ type: 'text', text: FIBONACCI }],
    stop_reason: 'end_turn',
  });
};
