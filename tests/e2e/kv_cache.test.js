// End-to-end tests of the prefix cache's disk tier: `shardlm serve --kv-cache-dir`
// driven by the official `openai` npm client.
//
// Goals: what a user sees: in a multi-turn chat each turn computes only the tokens past the
// cached page boundary (usage.prompt_tokens_details.cached_tokens, /metrics) and answers
// exactly as a server without cache; a restarted server on the same folder serves the next
// turn from disk (shardlm_prompt_tokens_disk_total) with the same text; the same with a
// local + remote split whose `shardlm shard` daemon was restarted too; a byte-flipped,
// truncated or other model's cache file gives the correct text and a log line, never a
// crash; a Q8_0 cache persists and restores in a folder of its own. Pages are 64 tokens (serve's page size). Every wait is bounded.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chat, complete, metric, story } from './client.js';
import {
  floorPage, kPageTokens, kServeArgs, kTestTimeout, qwenModel, startSplit, stop, storiesModel,
  turns,
} from './disk_tier.js';
import { binary, cleanUp, skipReason, startServer } from './harness.js';

const skip = skipReason('kv cache', [storiesModel, qwenModel]);

// What turns() cuts turn 1 from: three stories, several pages.
const kTurnText = `${story} ${story} ${story}`;

function snapFiles(dir) {
  const out = [];
  for (const sub of fs.readdirSync(dir)) {
    const folder = path.join(dir, sub);
    if (!fs.statSync(folder).isDirectory()) continue;
    for (const f of fs.readdirSync(folder)) {
      if (f.endsWith('.snap')) out.push(path.join(folder, f));
    }
  }
  return out;
}

let tmp;
let coldQwen;
let coldStories;

before(async () => {
  if (skip) return;
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shardlm-kvcache-'));
  [coldQwen, coldStories] = await Promise.all([
    startServer(binary, qwenModel, [...kServeArgs, '--no-prefix-cache']),
    startServer(binary, storiesModel, [...kServeArgs, '--no-prefix-cache']),
  ]);
});

after(() => cleanUp(tmp));

test('multi-turn chat computes only past the cached page boundary; restart hits disk',
  { skip, timeout: kTestTimeout }, async (t) => {
    const dir = path.join(tmp, 'chat', 'nested');  // created with its parents
    const args = [...kServeArgs, '--kv-cache-dir', dir, '--kv-cache-budget', '256MiB'];
    let server = await startServer(binary, qwenModel, args);
    assert.match(server.log(), /kv cache on disk: .* \(0 files/);
    const messages = [{ role: 'user', content: `${story} What did they find?` }];
    let previous = null;
    for (let turn = 0; turn < 3; ++turn) {
      if (turn === 2) {  // a restart between turns: the next one comes from disk
        await stop(server);
        server = await startServer(binary, qwenModel, args);
        assert.match(server.log(), /kv cache on disk: .* \([1-9]\d* files/);
      }
      const computedBefore = await metric(server, 'prompt_tokens_computed_total');
      const diskBefore = await metric(server, 'prompt_tokens_disk_total');
      const got = await chat(server, messages);
      const want = await chat(coldQwen, messages);
      assert.equal(got.text, want.text, `turn ${turn}: same text as without cache`);
      const cached = got.usage.prompt_tokens_details.cached_tokens;
      const prompt = got.usage.prompt_tokens;
      assert.equal(cached % kPageTokens, 0);
      if (previous) {
        // The previous turn's prompt is a prefix of this one; what it wrote ends one token
        // before its last reply token.
        assert.ok(cached > 0 && cached >= floorPage(previous.prompt_tokens),
          `turn ${turn}: ${cached} cached`);
        assert.ok(cached <= floorPage(previous.prompt_tokens + previous.completion_tokens - 1));
      } else {
        assert.equal(cached, 0);
      }
      assert.equal(await metric(server, 'prompt_tokens_computed_total') - computedBefore,
        prompt - cached, `turn ${turn}: only the tokens past the cached pages are computed`);
      const fromDisk = await metric(server, 'prompt_tokens_disk_total') - diskBefore;
      assert.equal(fromDisk, turn === 2 ? cached : 0, `turn ${turn}: tokens from disk`);
      t.diagnostic(`turn ${turn}: ${prompt} prompt tokens, ${cached} cached (${fromDisk} from disk)`);
      previous = got.usage;
      messages.push({ role: 'assistant', content: got.content });
      messages.push({ role: 'user', content: 'And then what happened to Max and Lily?' });
    }
    assert.ok(await metric(server, 'kv_disk_bytes_read_total') > 0);
    assert.ok(await metric(server, 'kv_disk_files') > 0);
    assert.equal(await metric(server, 'kv_disk_corrupt_files_total'), 0);
    await stop(server);
  });

test('local + remote split restores from disk after both processes restart',
  { skip, timeout: kTestTimeout }, async () => {
    const dir = path.join(tmp, 'split');
    const socket = path.join(tmp, 'kv.sock');
    const args = [...kServeArgs, '--kv-cache-dir', dir];
    let server = await startSplit(socket, args);
    const { t1, t2, cached2 } = await turns(server, kTurnText);
    await complete(server, t1);
    await server.stopSplit();
    assert.ok(snapFiles(dir).length >= cached2 / kPageTokens);

    server = await startSplit(socket, args);
    const got = await complete(server, t2);
    assert.equal(got.usage.prompt_tokens_details.cached_tokens, cached2);
    assert.equal(await metric(server, 'prompt_tokens_disk_total'), cached2);
    assert.equal(got.text, (await complete(coldQwen, t2)).text);
    await server.stopSplit();
  });

// A Q8_0 cache (34 bytes per 32 elements) is a different page geometry: its files land in
// their own subfolder, and a restart restores them with the text of a Q8_0 server without
// cache; the F16 folder of the same model is not used for it.
test('a q8_0 KV cache is persisted and restored after a restart',
  { skip, timeout: kTestTimeout }, async () => {
    const dir = path.join(tmp, 'q8_0');
    const q8 = ['--kv-type', 'q8_0'];
    const args = [...kServeArgs, ...q8, '--kv-cache-dir', dir];
    const cold = await startServer(binary, qwenModel, [...kServeArgs, ...q8, '--no-prefix-cache']);
    let server = await startServer(binary, qwenModel, args);
    const { t1, t2, cached2 } = await turns(server, kTurnText);
    await complete(server, t1);
    await stop(server);
    const folders = fs.readdirSync(dir);
    assert.equal(folders.length, 1);
    assert.ok(snapFiles(dir).length >= cached2 / kPageTokens);

    server = await startServer(binary, qwenModel, args);
    const got = await complete(server, t2);
    assert.equal(got.usage.prompt_tokens_details.cached_tokens, cached2);
    assert.equal(await metric(server, 'prompt_tokens_disk_total'), cached2);
    assert.equal(got.text, (await complete(cold, t2)).text);
    await stop(server);

    // The same folder under the default F16 cache: another geometry, another subfolder.
    server = await startServer(binary, qwenModel, [...kServeArgs, '--kv-cache-dir', dir]);
    const f16 = await complete(server, t2);
    assert.equal(await metric(server, 'prompt_tokens_disk_total'), 0);
    assert.equal(f16.usage.prompt_tokens_details.cached_tokens, 0);
    await stop(server);
    assert.equal(fs.readdirSync(dir).length, 2);
    await cold.kill();
  });

test('flipped, truncated and swapped cache files: correct text and a log line',
  { skip, timeout: kTestTimeout }, async () => {
    const dir = path.join(tmp, 'corrupt');
    const args = [...kServeArgs, '--kv-cache-dir', dir];
    const persist = async (model) => {
      const server = await startServer(binary, model, args);
      const t = await turns(server, kTurnText);
      await complete(server, t.t1);
      await stop(server);
      return t;
    };
    const subfolders = () => fs.readdirSync(dir).map((d) => path.join(dir, d));
    const filesIn = (folder) =>
      fs.readdirSync(folder).filter((f) => f.endsWith('.snap')).map((f) => path.join(folder, f));
    // Both models persist their turn 1 into the same folder (a subfolder each).
    const q = await persist(qwenModel);
    const [qwenFolder] = subfolders();
    const s = await persist(storiesModel);
    const storiesFolder = subfolders().find((d) => d !== qwenFolder);
    assert.ok(filesIn(qwenFolder).length > 0 && filesIn(storiesFolder).length > 0);

    // Restarts a server on the damaged folder: the cold text, nothing from disk, a log line.
    // (It computes and persists the prompt's pages again: fresh files for the next case.)
    const check = async (what, model, prompt, cold) => {
      const server = await startServer(binary, model, args);
      const got = await complete(server, prompt);
      assert.equal(got.text, (await complete(cold, prompt)).text, what);
      assert.equal(await metric(server, 'prompt_tokens_disk_total'), 0, what);
      assert.ok(await metric(server, 'kv_disk_corrupt_files_total') > 0, what);
      await stop(server);
      assert.match(server.log(), /kv-cache: /, what);
    };
    for (const f of filesIn(qwenFolder)) {
      const bytes = fs.readFileSync(f);
      bytes[bytes.length >> 1] ^= 0x5a;
      fs.writeFileSync(f, bytes);
    }
    await check('flipped bytes', qwenModel, q.t2, coldQwen);
    for (const f of filesIn(qwenFolder)) fs.truncateSync(f, fs.statSync(f).size - 100);
    await check('truncated', qwenModel, q.t2, coldQwen);
    // Each model's folder gets the other's files under its own names.
    const qwenFiles = filesIn(qwenFolder);
    const storiesFiles = filesIn(storiesFolder);
    const qwenBytes = qwenFiles.map((f) => fs.readFileSync(f));
    qwenFiles.forEach((f, i) => fs.copyFileSync(storiesFiles[i % storiesFiles.length], f));
    storiesFiles.forEach((f, i) => fs.writeFileSync(f, qwenBytes[i % qwenBytes.length]));
    await check('stories files in the qwen folder', qwenModel, q.t2, coldQwen);
    await check('qwen files in the stories folder', storiesModel, s.t2, coldStories);
  });
