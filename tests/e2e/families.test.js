// End-to-end tests every model family passes alike, through `shardlm serve` and the official
// `openai` client: a local split and a remote stage (a `shardlm shard` daemon) answer with the
// text of the unsplit server, on a prompt long enough for each family's point (past gemma3's
// window of 16; through qwen35's recurrent state, with a local stage that holds a DeltaNet
// layer and no KV at all; gemma4's shared-KV layers kept with the layers they read).
// Fixtures: SHARDLM_FIXTURES or ../../../shared/fixtures; missing → skip (fail under CI).
// Binary: SHARDLM_BIN or ../../build/shardlm.
import { test, before, after } from 'node:test';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { complete } from './client.js';
import { kServeArgs, kTestTimeout, turns } from './disk_tier.js';
import { expectSplitsGiveUnsplitText, kAnswerTokens, kTurnText } from './families.js';
import { binary, cleanUp, fixtures, skipReason, startServer } from './harness.js';

const kFamilies = [
  { name: 'gemma3', file: 'gemma3-tiny.gguf', localSplit: '3,3', remoteSplit: '4,2' },
  { name: 'qwen35', file: 'qwen35-tiny.gguf', localSplit: '1,3', remoteSplit: '2,2' },
  // Both splits ask for a boundary inside the layers that share KV: it moves to layer 1.
  { name: 'gemma4', file: 'gemma4-tiny.gguf', localSplit: '3,2', remoteSplit: '2,3' },
];

let tmp;
before(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shardlm-families-'));
});
after(() => cleanUp(tmp));

for (const family of kFamilies) {
  const model = path.join(fixtures, family.file);
  const skip = skipReason(family.name, [model]);
  test(`${family.name}: a local split and a remote stage give the unsplit text`,
    { skip, timeout: kTestTimeout }, async () => {
      const cold = await startServer(binary, model, [...kServeArgs, '--no-prefix-cache']);
      try {
        const { t2 } = await turns(cold, kTurnText);
        const want = await complete(cold, t2, kAnswerTokens);
        await expectSplitsGiveUnsplitText({
          model, tmp, prompt: t2, answerTokens: kAnswerTokens, want,
          localSplit: family.localSplit, remoteSplit: family.remoteSplit,
        });
      } finally {
        await cold.kill();
      }
    });
}
