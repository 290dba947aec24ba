// End-to-end tests of the /slots routes: `shardlm serve --slot-save-path` driven
// by the official `openai` npm client for the chat and `fetch` for /slots.
//
// Goals: what a user sees: a chat turn, `POST /slots/0?action=save`, a restarted server,
// `?action=restore`, and the next turn reports the restored pages as cached tokens and
// answers exactly as a server without any cache; the same through a local + remote split
// whose `shardlm shard` daemon restarted too; file names that could leave the folder get
// 400 and nothing is written outside it; a corrupt, truncated or other model's file gets
// 400, a missing one 404, and the server keeps serving with the slot unchanged. Pages are
// 64 tokens (serve's page size). Every wait is bounded.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chat, complete, metric, saveBusiest, slotAction, slots, story } from './client.js';
import {
  floorPage, kPageTokens, kServeArgs, kTestTimeout, qwenModel, startSplit, stop, storiesModel,
  turns,
} from './disk_tier.js';
import { binary, cleanUp, skipReason, startServer } from './harness.js';

const skip = skipReason('slots', [storiesModel, qwenModel]);

// An OpenAI error object with this status.
function assertError(r, status, what) {
  assert.equal(r.status, status, `${what}: ${JSON.stringify(r.body)}`);
  for (const k of ['message', 'type', 'param', 'code']) {
    assert.ok(k in r.body.error, `${what}: error.${k} in ${JSON.stringify(r.body)}`);
  }
  return r.body.error;
}

let tmp;
let coldQwen;

before(async () => {
  if (skip) return;
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shardlm-slots-'));
  coldQwen = await startServer(binary, qwenModel, [...kServeArgs, '--no-prefix-cache']);
});

after(() => cleanUp(tmp));

test('save, restart, restore: the next turn is cached and answers like a cold server',
  { skip, timeout: kTestTimeout }, async (t) => {
    const dir = path.join(tmp, 'chat', 'slots');  // created with its parents
    const args = [...kServeArgs, '--slot-save-path', dir];
    let server = await startServer(binary, qwenModel, args);
    const messages = [{ role: 'user', content: `${story} ${story} What did they find?` }];
    const first = await chat(server, messages);
    assert.ok(first.usage.prompt_tokens > kPageTokens, `${first.usage.prompt_tokens} tokens`);
    const { slot, saved } = await saveBusiest(server, 'chat1');
    // The slot holds the prompt and every reply token but the last (never fed).
    const held = first.usage.prompt_tokens + first.usage.completion_tokens - 1;
    assert.equal(slot.n_tokens, held);
    assert.equal(slot.state, 'idle');
    assert.deepEqual(Object.keys(saved).sort(),
      ['filename', 'id_slot', 'n_saved', 'n_written', 'timings']);
    assert.equal(saved.id_slot, slot.id);
    assert.equal(saved.filename, 'chat1');
    assert.equal(saved.n_saved, held);
    assert.equal(saved.n_written, fs.statSync(path.join(dir, 'chat1')).size);
    assert.equal(typeof saved.timings.save_ms, 'number');
    await stop(server);

    server = await startServer(binary, qwenModel, args);
    const restored = await slotAction(server, 1, 'restore', 'chat1');
    assert.equal(restored.status, 200, JSON.stringify(restored.body));
    assert.equal(restored.body.id_slot, 1);
    assert.equal(restored.body.n_restored, held);
    assert.equal(restored.body.n_read, saved.n_written);
    assert.equal(typeof restored.body.timings.restore_ms, 'number');
    assert.equal((await slots(server))[1].n_tokens, held);

    messages.push({ role: 'assistant', content: first.content });
    messages.push({ role: 'user', content: 'And then what happened to Max and Lily?' });
    const got = await chat(server, messages);
    const want = await chat(coldQwen, messages);
    assert.equal(got.text, want.text, 'same text as a server without cache');
    const cached = got.usage.prompt_tokens_details.cached_tokens;
    t.diagnostic(`${got.usage.prompt_tokens} prompt tokens, ${cached} cached, ${held} restored`);
    assert.ok(cached > 0 && cached >= floorPage(first.usage.prompt_tokens), `${cached} cached`);
    assert.ok(cached <= floorPage(held));
    assert.equal(await metric(server, 'prompt_tokens_memory_total'), cached);
    assert.equal(await metric(server, 'prompt_tokens_computed_total'),
      got.usage.prompt_tokens - cached);
    await stop(server);
  });

test('local + remote split: save, restart both processes, restore',
  { skip, timeout: kTestTimeout }, async () => {
    const dir = path.join(tmp, 'split');
    const socket = path.join(tmp, 'slots.sock');
    const args = [...kServeArgs, '--slot-save-path', dir];
    let server = await startSplit(socket, args);
    const { t1, t2, cached2 } = await turns(server, `${story} ${story}`);
    await complete(server, t1);
    await saveBusiest(server, 'split1');
    await server.stopSplit();

    server = await startSplit(socket, args);
    const restored = await slotAction(server, 0, 'restore', 'split1');
    assert.equal(restored.status, 200, JSON.stringify(restored.body));
    const got = await complete(server, t2);
    assert.equal(got.usage.prompt_tokens_details.cached_tokens, cached2);
    assert.equal(got.text, (await complete(coldQwen, t2)).text);
    await server.stopSplit();
  });

test('file names stay in the slot folder; save and restore are off without one',
  { skip, timeout: kTestTimeout }, async () => {
    const parent = path.join(tmp, 'names');
    const dir = path.join(parent, 'slots');
    let server = await startServer(binary, storiesModel, [...kServeArgs, '--slot-save-path', dir]);
    await complete(server, 'Once upon a time');
    for (const name of ['../x', '/etc/passwd', 'a/b', '', '.hidden', '..', '../slots/x']) {
      for (const action of ['save', 'restore']) {
        const r = await slotAction(server, 0, action, name);
        const e = assertError(r, 400, `${action} '${name}'`);
        assert.equal(e.param, 'filename');
      }
    }
    assert.deepEqual(fs.readdirSync(parent), ['slots']);
    assert.deepEqual(fs.readdirSync(dir), []);
    assertError(await slotAction(server, 0, 'save'), 400, 'no filename');
    assertError(await slotAction(server, 0, 'load', 'x'), 400, 'unknown action');
    assert.equal(assertError(await slotAction(server, 7, 'save', 'x'), 404, 'slot 7').code,
      'slot_not_found');
    await stop(server);

    server = await startServer(binary, storiesModel, kServeArgs);
    const off = assertError(await slotAction(server, 0, 'save', 'x'), 400, 'no folder');
    assert.match(off.message, /--slot-save-path/);
    await stop(server);
  });

test('corrupt, truncated, missing and other-model files: 400/404, the server keeps serving',
  { skip, timeout: kTestTimeout }, async () => {
    const dir = path.join(tmp, 'bad');
    const args = [...kServeArgs, '--slot-save-path', dir];
    const other = await startServer(binary, storiesModel, args);
    await complete(other, 'Once upon a time');
    await saveBusiest(other, 'stories');
    await stop(other);

    const server = await startServer(binary, qwenModel, args);
    const messages = [{ role: 'user', content: `${story} What did they find?` }];
    await chat(server, messages);
    const { slot } = await saveBusiest(server, 'good');
    const good = fs.readFileSync(path.join(dir, 'good'));
    const flipped = Buffer.from(good);
    flipped[flipped.length >> 1] ^= 0x5a;
    fs.writeFileSync(path.join(dir, 'flipped'), flipped);
    fs.writeFileSync(path.join(dir, 'truncated'), good.subarray(0, good.length - 100));
    for (const name of ['flipped', 'truncated', 'stories']) {
      const e = assertError(await slotAction(server, slot.id, 'restore', name), 400, name);
      assert.equal(e.code, 'invalid_slot_file');
      assert.equal(e.param, 'filename');
      assert.match(e.message, new RegExp(name));
    }
    const e = assertError(await slotAction(server, slot.id, 'restore', 'nothing'), 404, 'missing');
    assert.equal(e.code, 'file_not_found');
    // Nothing changed, and the server answers as before.
    assert.equal((await slots(server))[slot.id].n_tokens, slot.n_tokens);
    const got = await chat(server, messages);
    assert.equal(got.text, (await chat(coldQwen, messages)).text);
    assert.equal((await slotAction(server, slot.id, 'restore', 'good')).status, 200);
    await stop(server);
  });
