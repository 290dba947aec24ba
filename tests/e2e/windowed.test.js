// End-to-end tests of the models with windowed attention layers (gemma3-tiny: five layers with
// a window of 16 positions, one global layer; gemma4-tiny: windowed and global layers of two
// head shapes, the last two reading earlier layers' KV) through `shardlm serve` and the
// official `openai` client.
//
// Goals: what a user of such a model sees is what a qwen3 user sees: a restarted server on its
// `--kv-cache-dir` and a slot restored from `--slot-save-path` serve the next turn from the
// cached pages with the text of a server without cache (splits: families.test.js).
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { complete, saveBusiest, slotAction } from './client.js';
import { floorPage, kServeArgs, kTestTimeout, stop } from './disk_tier.js';
import { binary, startServer } from './harness.js';
import { coldTurns, familySetup, kAnswerTokens } from './families.js';

for (const [name, file] of [['gemma3', 'gemma3-tiny.gguf'], ['gemma4', 'gemma4-tiny.gguf']]) {
  const family = familySetup(name, file);
  const { model: gemmaModel, skip } = family;

  test(`${name}: a restart on the disk cache and a restored slot serve the next turn from cached pages`,
    { skip, timeout: kTestTimeout }, async () => {
      const { t1, t2, cached2, want } = await coldTurns(family);
      const { tmp } = family;
      const cacheDir = path.join(tmp, 'cache');
      const slotDir = path.join(tmp, 'slots');
      const args = [...kServeArgs, '--kv-cache-dir', cacheDir, '--slot-save-path', slotDir];
      let server = await startServer(binary, gemmaModel, args);
      await complete(server, t1);
      await saveBusiest(server, 'turn1');
      await stop(server);

      server = await startServer(binary, gemmaModel, args);
      const got = await complete(server, t2, kAnswerTokens);
      assert.equal(got.usage.prompt_tokens_details.cached_tokens, cached2);
      assert.equal(got.text, want.text);
      await stop(server);

      server = await startServer(binary, gemmaModel, [...kServeArgs, '--slot-save-path', slotDir]);
      const restored = await slotAction(server, 0, 'restore', 'turn1');
      assert.equal(restored.status, 200, JSON.stringify(restored.body));
      const again = await complete(server, t2, kAnswerTokens);
      assert.ok(again.usage.prompt_tokens_details.cached_tokens >= floorPage(t1.length),
        JSON.stringify(again.usage));
      assert.equal(again.text, want.text);
      await stop(server);
    });
}
