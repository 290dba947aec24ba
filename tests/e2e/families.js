// What every model family's e2e test does the same way: its setup (a fixture model, a temp
// folder, a server without prefix cache to compare with) and the check that a local split and a
// remote stage (a `shardlm shard` daemon) answer with the text of the unsplit server.
import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { complete, story } from './client.js';
import { kServeArgs, stop, turns } from './disk_tier.js';
import { binary, cleanUp, fixtures, skipReason, startServer, startShard } from './harness.js';

// Several pages of prompt (several windows of gemma3's), and of answer.
export const kTurnText = `${story} ${story} ${story}`;
export const kAnswerTokens = 64;

// Registers the file's before/after hooks: `family.tmp` and `family.cold` (a server of the model
// without prefix cache) exist while its tests run; `family.skip` says why they cannot.
export function familySetup(name, file) {
  const model = path.join(fixtures, file);
  const family = { model, skip: skipReason(name, [model]), tmp: null, cold: null };
  before(async () => {
    if (family.skip) return;
    family.tmp = fs.mkdtempSync(path.join(os.tmpdir(), `shardlm-${name}-`));
    family.cold = await startServer(binary, model, [...kServeArgs, '--no-prefix-cache']);
  });
  after(() => cleanUp(family.tmp));
  return family;
}

// Two turns of kTurnText (disk_tier.js's turns) and the cold server's answer to the second.
export async function coldTurns(family) {
  const { t1, t2, cached2 } = await turns(family.cold, kTurnText);
  const want = await complete(family.cold, t2, kAnswerTokens);
  return { t1, t2, cached2, want };
}

// `want` is the unsplit server's completion of `prompt` (answerTokens tokens); localSplit and
// remoteSplit are --layer-split values for `cpu,cpu` and `cpu,unix:<socket in tmp>`.
export async function expectSplitsGiveUnsplitText(
  { model, tmp, prompt, answerTokens, want, localSplit, remoteSplit },
) {
  const local = await startServer(binary, model,
    [...kServeArgs, '--devices', 'cpu,cpu', '--layer-split', localSplit]);
  const socket = path.join(tmp, `${path.basename(model, '.gguf')}.sock`);
  const shard = await startShard(binary, socket, 1);
  const remote = await startServer(binary, model,
    [...kServeArgs, '--devices', `cpu,unix:${socket}`, '--layer-split', remoteSplit]);
  try {
    assert.equal((await complete(local, prompt, answerTokens)).text, want.text);
    assert.equal((await complete(remote, prompt, answerTokens)).text, want.text);
  } finally {
    await Promise.all([local.kill(), stop(remote)]);
    await shard.kill();
  }
}
