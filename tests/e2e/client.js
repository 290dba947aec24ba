// Requests the end-to-end tests send through the official openai client (and plain fetch for
// shardlm's own routes), shared by the kv-cache, slots and model-family tests.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

export const clientOf = (server) =>
  new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });

// A user message long enough to fill several 64-token pages of the fixture models.
export const story =
  'Once upon a time, there was a little dog named Max. He liked to run in the park with ' +
  'his friend Lily. One day they found a big red ball under a tree, and they played until ' +
  'the sun went down and the stars came out over the quiet town.';

// The greedy chat answer (EOG ignored) and its usage.
export async function chat(server, messages, maxTokens = 24) {
  const r = await clientOf(server).chat.completions.create({
    model: 'm', messages, temperature: 0, max_tokens: maxTokens, ignore_eos: true,
  });
  const m = r.choices[0].message;
  return { text: (m.reasoning_content ?? '') + (m.content ?? ''), content: m.content ?? '',
    usage: r.usage };
}

// A completion on a token-id prompt: the prompt is exactly these tokens.
export async function complete(server, prompt, maxTokens = 16) {
  const r = await clientOf(server).completions.create({
    model: 'm', prompt, temperature: 0, max_tokens: maxTokens, ignore_eos: true,
  });
  return { text: r.choices[0].text, usage: r.usage };
}

// The server's token ids of `content` (special tokens added as the model says).
export async function tokenize(server, content) {
  const r = await fetch(`${server.base}/tokenize`, {
    method: 'POST', body: JSON.stringify({ content, add_special: true }),
  });
  return (await r.json()).tokens;
}

// The value of the counter shardlm_<name> on GET /metrics (the test fails when it is absent).
export async function metric(server, name) {
  const text = await (await fetch(`${server.base}/metrics`)).text();
  const value = new RegExp(`^shardlm_${name} (\\d+)$`, 'm').exec(text)?.[1];
  assert.ok(value !== undefined, `no shardlm_${name} in /metrics:\n${text}`);
  return Number(value);
}

// POST /slots/{id}?action=...: { status, body } (body parsed).
export async function slotAction(server, id, action, filename) {
  const init = { method: 'POST', headers: { 'Content-Type': 'application/json' } };
  init.body = JSON.stringify(filename === undefined ? {} : { filename });
  const r = await fetch(`${server.base}/slots/${id}?action=${action}`, init);
  return { status: r.status, body: await r.json() };
}

// GET /slots: every slot's state.
export async function slots(server) {
  const r = await fetch(`${server.base}/slots`);
  assert.equal(r.status, 200);
  return r.json();
}

// Saves the slot that ran the last request (the one holding tokens) as `filename`.
export async function saveBusiest(server, filename) {
  const held = (await slots(server)).reduce((a, b) => (b.n_tokens > a.n_tokens ? b : a));
  assert.ok(held.n_tokens > 0, 'a slot holds the last request');
  const r = await slotAction(server, held.id, 'save', filename);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { slot: held, saved: r.body };
}
