// End-to-end tests of a model with recurrent layers (qwen35-tiny: three gated DeltaNet layers,
// one gated attention layer) through `shardlm serve` and the official `openai` client.
//
// Goals: what a user of such a model sees is what a qwen3 user sees: a next turn, a restarted
// server on its `--kv-cache-dir` and a slot restored from `--slot-save-path` into a server
// without a disk cache serve from the cached pages and the recurrent state kept beside them (in the
// slot file: the state at its last whole page) with the text of the conversation never saved
// and of a server without cache (splits: families.test.js).
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { complete, saveBusiest, slotAction } from './client.js';
import { floorPage, kServeArgs, kTestTimeout, stop } from './disk_tier.js';
import { binary, startServer } from './harness.js';
import { coldTurns, familySetup, kAnswerTokens } from './families.js';

const family = familySetup('qwen35', 'qwen35-tiny.gguf');
const { model: qwen35Model, skip } = family;

test('a next turn, a restart on the disk cache and a restored slot resume from the cached pages '
  + 'and state', { skip, timeout: kTestTimeout }, async () => {
    const { t1, t2, cached2, want } = await coldTurns(family);
    const { tmp } = family;
    const cacheDir = path.join(tmp, 'cache');
    const slotDir = path.join(tmp, 'slots');
    const args = [...kServeArgs, '--kv-cache-dir', cacheDir, '--slot-save-path', slotDir];
    let server = await startServer(binary, qwen35Model, args);
    await complete(server, t1);
    // Saved before the next turn: turn 1 with its reply, and the state at its last whole page.
    const { saved } = await saveBusiest(server, 'turn1');
    const warm = await complete(server, t2, kAnswerTokens);
    assert.equal(warm.usage.prompt_tokens_details.cached_tokens, cached2);
    assert.equal(warm.text, want.text);
    await stop(server);

    server = await startServer(binary, qwen35Model, args);
    const got = await complete(server, t2, kAnswerTokens);
    assert.equal(got.usage.prompt_tokens_details.cached_tokens, cached2);
    assert.ok(cached2 >= floorPage(t1.length), JSON.stringify(got.usage));
    assert.equal(got.text, want.text);
    await stop(server);

    // No disk cache: only the slot file brings turn 1 and its state back.
    server = await startServer(binary, qwen35Model, [...kServeArgs, '--slot-save-path', slotDir]);
    const restored = await slotAction(server, 1, 'restore', 'turn1');
    assert.equal(restored.status, 200, JSON.stringify(restored.body));
    assert.equal(restored.body.n_read, saved.n_written);
    // The restored slot holds the file's state: saved again, it writes the same bytes.
    const again = await slotAction(server, 1, 'save', 'turn1-again');
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.ok(fs.readFileSync(path.join(slotDir, 'turn1-again'))
      .equals(fs.readFileSync(path.join(slotDir, 'turn1'))));
    const next = await complete(server, t2, kAnswerTokens);
    assert.equal(next.usage.prompt_tokens_details.cached_tokens, cached2);
    assert.equal(next.text, warm.text);
    await stop(server);
  });
