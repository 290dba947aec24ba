// End-to-end tests of a model with recurrent layers (qwen35-tiny: three gated DeltaNet layers,
// one gated attention layer) through `shardlm serve` and the official `openai` client.
//
// Goals: what a user of such a model sees is what a qwen3 user sees: a next turn and a
// restarted server on its `--kv-cache-dir` serve from the cached pages and the recurrent state
// kept beside them with the text of a server without cache (splits: families.test.js). Slot files do not carry the
// recurrent state yet: a save is refused with a clear error, and serving goes on.
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { complete, slotAction } from './client.js';
import { floorPage, kServeArgs, kTestTimeout, stop } from './disk_tier.js';
import { binary, startServer } from './harness.js';
import { coldTurns, familySetup, kAnswerTokens } from './families.js';

const family = familySetup('qwen35', 'qwen35-tiny.gguf');
const { model: qwen35Model, skip } = family;

test('a next turn and a restart on the disk cache resume from the cached pages and state',
  { skip, timeout: kTestTimeout }, async () => {
    const { t1, t2, cached2, want } = await coldTurns(family);
    const { tmp } = family;
    const cacheDir = path.join(tmp, 'cache');
    const args = [...kServeArgs, '--kv-cache-dir', cacheDir, '--slot-save-path',
      path.join(tmp, 'slots')];
    let server = await startServer(binary, qwen35Model, args);
    await complete(server, t1);
    const warm = await complete(server, t2, kAnswerTokens);
    assert.equal(warm.usage.prompt_tokens_details.cached_tokens, cached2);
    assert.equal(warm.text, want.text);
    // Slot files would lose the recurrent state: refused, naming why.
    const saved = await slotAction(server, 0, 'save', 'turn1');
    assert.notEqual(saved.status, 200);
    assert.match(JSON.stringify(saved.body), /recurrent/);
    await stop(server);

    server = await startServer(binary, qwen35Model, args);
    const got = await complete(server, t2, kAnswerTokens);
    assert.equal(got.usage.prompt_tokens_details.cached_tokens, cached2);
    assert.ok(cached2 >= floorPage(t1.length), JSON.stringify(got.usage));
    assert.equal(got.text, want.text);
    await stop(server);
  });
